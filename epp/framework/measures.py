"""What a plugin measures of itself, published on ``/metrics`` without the plugin knowing about metrics.

Plugins import only the framework, so they declare no Prometheus series. A plugin with something
to report implements :class:`Measured`: just before each scrape of ``/metrics`` the picker calls
``measure`` on every plugin of the configurations in force (in every pool) with a
:class:`Measurements`, whose implementation owns the series (upstream's names) and sums what
several plugins or pools report under the same labels. Asking at scrape time costs the request
path nothing and follows reloads by itself: a plugin no longer in force is not asked, and what
only it reported leaves ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from epp.framework.plugin import TypedName

__all__ = ["KvEventCounts", "Measured", "Measurements", "TokenCacheCounts"]


@dataclass(slots=True)
class KvEventCounts:
    """What one KV-event source has counted since it started (plain increments on its own task)."""

    messages: int = 0
    """Messages received live (malformed ones included; replayed ones are not)."""
    gaps: int = 0
    replays: int = 0
    restarts: int = 0
    decode_errors: int = 0
    disconnects: int = 0
    reconnections: int = 0
    """Sockets rebuilt after a ZMQ error (ZMQ's own reconnects of a dropped peer are :attr:`disconnects`)."""

    def add(self, other: KvEventCounts) -> None:
        """Add ``other``'s counts to these (sources of the same endpoint are summed)."""
        self.messages += other.messages
        self.gaps += other.gaps
        self.replays += other.replays
        self.restarts += other.restarts
        self.decode_errors += other.decode_errors
        self.disconnects += other.disconnects
        self.reconnections += other.reconnections


@dataclass(slots=True)
class TokenCacheCounts:
    """What a token-id cache has counted since it was made, and what it holds now."""

    hits: int = 0
    """Prompts served wholly from the cache."""
    misses: int = 0
    """Prompts that needed tokenizing (all of them, or what followed a cached prefix)."""
    evictions: int = 0
    prefix_tokens: int = 0
    """Ids served from cached prefixes to prompts that were then tokenized past them."""
    seam_failures: int = 0
    tokens: int = 0
    """Ids held now."""
    prefix_reuse: bool = False
    """Whether prompts sharing a beginning reuse its ids (off: whole prompts only)."""


class Measurements(Protocol):
    """Where a plugin reports, once per scrape; a value reported twice under the same labels is summed."""

    def prefix_index_size(self, plugin: TypedName, entries: int) -> None:
        """Entries in a prefix index the plugin holds (the ``prefix_indexer_size`` gauges)."""
        ...

    def kv_event_subscribers(self, active: int) -> None:
        """KV-event subscriber sockets the plugin runs now (a central one included), retrying ones too."""
        ...

    def kv_event_source(self, endpoint: str, counts: KvEventCounts) -> None:
        """The counts of a KV-event source of ``endpoint`` (its key): a dialled subscriber, or an engine
        heard on a central socket."""
        ...

    def kv_events_unattributed(self, count: int) -> None:
        """KV-event messages a central socket dropped: their topic named no endpoint of the pool."""
        ...

    def kv_index(self, blocks: Mapping[str, int], stores_skipped: int) -> None:
        """A precise index: engine blocks held per endpoint key, and the BlockStored events it could not index."""
        ...

    def token_cache(self, plugin: TypedName, counts: TokenCacheCounts) -> None:
        """A token producer's cache of token ids."""
        ...

    def kv_index_backend(
        self, plugin: TypedName, *, connected: bool, lookup_failures: int, dropped_writes: int, disconnects: int
    ) -> None:
        """A precise index on a Valkey/Redis server: whether it is reached, lookups without an answer in
        time, write operations lost to a full queue, and times the server was lost."""
        ...


@runtime_checkable
class Measured(Protocol):
    """A plugin that reports what it measures (see the module docstring)."""

    def measure(self, into: Measurements) -> None: ...
