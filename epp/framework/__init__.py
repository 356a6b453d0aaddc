"""Contracts between the picker's layers: endpoints, requests, plugins, scheduling, saturation.

Nothing here does I/O; it imports nothing from epp but ``errors`` and ``clock``.
"""
