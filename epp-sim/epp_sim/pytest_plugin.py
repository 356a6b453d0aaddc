"""pytest plugin of epp-sim (loaded through the ``pytest11`` entry point)."""

from __future__ import annotations
