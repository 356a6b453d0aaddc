"""The accessor rule of every stack part: a part that is not started yet says so by name."""

from __future__ import annotations

from typing import TypeVar

__all__ = ["require"]

_T = TypeVar("_T")


def require(value: _T | None, owner: str, what: str) -> _T:
    """``value``, or RuntimeError("<owner> not started: no <what> yet") while it is None."""
    if value is None:
        raise RuntimeError(f"{owner} not started: no {what} yet")
    return value
