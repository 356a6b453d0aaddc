"""Generated from ``protos/epp/v1`` at build time (``setup.py build_protos``); never edited or committed."""
