"""Contracts between the picker's layers: endpoints, requests, plugins, scheduling, saturation.

Nothing here does I/O; it imports nothing from epp but ``errors``, ``clock`` and ``durations``.
The public plugin API (:mod:`epp.plugin_api`) is a chosen part of it.
"""
