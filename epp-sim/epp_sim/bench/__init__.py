"""`epp bench`: the picker's overhead and routing quality, measured against baselines."""
