"""What a picker shares with the other pickers of its pool: the contracts between plugins and the state sync.

Several pickers serve one pool when it runs with replicas (active-active behind one gateway) or
with ``--workers``; each learns some things alone, from the requests it routes. What routing
needs them to agree on travels between them (``epp.statesync``):

- :class:`Replicated`: a plugin whose state grows from its own decisions (the approximate prefix
  index: which prompt blocks went where) publishes each change as an opaque payload and applies
  its peers' payloads; the runtime binds it to the pool's sync, or unbinds it (``None``).
- in-flight counts are the pipeline's, on :class:`~epp.framework.endpoint.EndpointState`: the
  sync adds the peers' counts to each endpoint's and takes them out when a peer goes away.
- :class:`SyncSettings`: where the replicas meet (a Valkey or Redis server) and how often
  in-flight counts go out (``epp serve --state-sync-address``, ``--state-sync-interval``).
  llm-d's ``dataLayer.crossReplicaSyncerPluginRef`` names a plugin kind that upstream defines
  only as an interface; it stays refused by the loader.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

__all__ = ["Publish", "Replicated", "SyncSettings"]

Publish = Callable[[bytes], None]
"""Hands one payload to the pool's sync; never blocks, never raises (the sync buffers, bounded)."""


@runtime_checkable
class Replicated(Protocol):
    """A plugin whose state its peers should learn, and which learns theirs."""

    def replicate(self, publish: Publish | None) -> None:
        """From now on, publish every change of the shared state through ``publish`` (None: stop)."""
        ...

    def apply_replicated(self, payload: bytes) -> None:
        """Apply a payload one of the peers' instance of this plugin (same name) published.

        A payload that cannot be read raises ``ValueError``: the sync counts it and goes on.
        """
        ...


@dataclass(frozen=True, slots=True)
class SyncSettings:
    """Where a pool's pickers share state and how.

    ``address`` is a ``redis://``, ``rediss://``, ``valkey://``, ``valkeys://`` or ``unix://`` URL
    (llm-d's forms; a bare ``host:port`` means ``redis://``). ``stream_length`` bounds what the
    server keeps (entries of the pool's stream, each one picker's batch of a few milliseconds);
    ``in_flight_interval`` is how often each picker's in-flight counts go out when they changed
    (and, every ``heartbeat_intervals`` of them, when not); a peer not heard of for
    ``expiry_intervals`` intervals counts as gone.
    """

    address: str
    stream_length: int = 10_000
    in_flight_interval: float = 0.2
    heartbeat_intervals: int = 5
    expiry_intervals: int = 15
    key_prefix: str = "epp:sync"

    def __post_init__(self) -> None:
        if self.stream_length < 100:
            raise ValueError(f"stream_length must be >= 100, got {self.stream_length}")
        if self.in_flight_interval <= 0:
            raise ValueError(f"in_flight_interval must be > 0, got {self.in_flight_interval}")
        if self.heartbeat_intervals < 1 or self.expiry_intervals <= self.heartbeat_intervals:
            raise ValueError(
                f"need heartbeat_intervals ({self.heartbeat_intervals}) >= 1 and expiry_intervals "
                f"({self.expiry_intervals}) > heartbeat_intervals"
            )

    @property
    def expiry(self) -> float:
        """Seconds after which a silent peer's in-flight counts are dropped."""
        return self.in_flight_interval * self.expiry_intervals
