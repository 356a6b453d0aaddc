"""epp: a Python Endpoint Picker for LLM inference behind an Envoy gateway.

Importing this package starts nothing; the composition roots are ``epp.cli`` and ``epp.runtime``.
"""

__version__ = "0.1.0"
