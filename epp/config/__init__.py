"""Configuration: flags (``options``), the EndpointPickerConfig format, its defaults, loader and reload."""
