"""Kubernetes time formats: RFC 3339 timestamps and the ``kubectl`` age string."""

from __future__ import annotations

import datetime as dt

__all__ = ["human_age", "parse_time", "rfc3339"]


def rfc3339(wall: float) -> str:
    """``metav1.Time``: second precision, UTC, ``Z``."""
    return dt.datetime.fromtimestamp(int(wall), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 string, or None when it is not one."""
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except (ValueError, AttributeError):
        return None


def human_age(seconds: float) -> str:
    """``duration.HumanDuration`` as kubectl prints AGE: 45s, 3m12s, 25m, 5h3m, 30h, 3d4h, 60d."""
    s = max(0, int(seconds))
    if s < 120:
        return f"{s}s"
    m = s // 60
    if m < 10:
        return f"{m}m{s % 60}s" if s % 60 else f"{m}m"
    if m < 180:
        return f"{m}m"
    h = s // 3600
    if h < 8:
        return f"{h}h{m % 60}m" if m % 60 else f"{h}h"
    if h < 48:
        return f"{h}h"
    d = h // 24
    if h < 24 * 8:
        return f"{d}d{h % 24}h" if h % 24 else f"{d}d"
    if d < 365 * 2:
        return f"{d}d"
    return f"{d // 365}y{d % 365}d" if d < 365 * 8 else f"{d // 365}y"
