"""Go ``time.ParseDuration`` syntax (``50ms``, ``1.5s``, ``1m30s``), as upstream flags and configs use.

Shared by the flag parser and plugin parameters so both accept exactly the same strings.
"""

from __future__ import annotations

import re

__all__ = ["parse_duration"]

_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_UNIT_SECONDS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (a bare number is seconds); raises ValueError otherwise."""
    body = text.strip()
    try:
        return float(body)
    except ValueError:
        pass
    sign = -1.0 if body.startswith("-") else 1.0
    body = body.lstrip("+-")
    pos, total = 0, 0.0
    while pos < len(body):
        match = _DURATION_PART.match(body, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos == 0:
        raise ValueError(f"invalid duration {text!r}")
    return sign * total
