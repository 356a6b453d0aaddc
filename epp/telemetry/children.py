"""The one label-child cache, and the one cap on label values that come from clients.

Resolving a metric's child for a tuple of label values builds a key and looks it up; the request
path does that per request for several metrics. So whatever was resolved for a tuple of label
values (one family's child, or the bundle of children an ext_proc stream writes) is kept in a
:class:`ChildCache`, keyed by the values. It is bounded, since label values come from clients
(model names): when it is full it is emptied and refilled, which costs lookups, never series.

A label whose values come straight from a client header (the fairness id) is a
:class:`CappedLabel`: past ``limit`` distinct values, every new value is reported as one
overflow value, as upstream caps it, so a client cannot make the series grow without bound.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

__all__ = ["CappedLabel", "ChildCache"]

MAX_CACHED = 4096

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class ChildCache(Generic[K, V]):
    """Label values → what ``make`` resolved for them, made on first use; at most ``size`` kept."""

    __slots__ = ("_items", "_make", "_size")

    def __init__(self, make: Callable[[K], V], *, size: int = MAX_CACHED) -> None:
        self._make = make
        self._size = size
        self._items: dict[K, V] = {}

    def get(self, key: K) -> V:
        item = self._items.get(key)
        if item is None:
            if len(self._items) >= self._size:
                self._items.clear()
            item = self._items[key] = self._make(key)
        return item

    def forget(self, key: K) -> None:
        """Drop what was resolved for ``key`` (its series were removed)."""
        self._items.pop(key, None)


class CappedLabel:
    """A client-supplied label: its first ``limit`` distinct values as they are, any later one as ``overflow``."""

    __slots__ = ("_limit", "_overflow", "_seen")

    def __init__(self, limit: int, overflow: str) -> None:
        self._limit = limit
        self._overflow = overflow
        self._seen: set[str] = set()

    def value(self, raw: str) -> str:
        seen = self._seen
        if raw not in seen:
            if len(seen) >= self._limit:
                return self._overflow
            seen.add(raw)
        return raw
