"""The scheduler: profiles (filters → weighted scorers → picker) run under a profile handler."""
