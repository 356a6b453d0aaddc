"""The peers' in-flight counts, folded into the pool's endpoints so every reader sees the pool's total.

The pipeline counts each request in and out on its endpoint's
:class:`~epp.framework.endpoint.EndpointState` (``in_flight_requests``/``in_flight_tokens``), and
every reader (the in-flight scorers, the utilization filter, the pool gauges, the API) reads those
two fields (the ``concurrency-detector`` keeps counts of its own, which stay per replica). So the
peers' counts go into the same fields: each peer's latest record (its own counts, whole)
replaces its previous one and only the difference is applied, and a peer that goes away (silent
for too long) has all of its counts taken back out. What this picker itself has in flight is then
the fields minus the peers' sum (:meth:`InFlightShare.local`). Endpoints joining get the peers'
counts for their key; leaving, they take them along.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from epp.framework.endpoint import EndpointState
from epp.statesync.records import Counts

__all__ = ["InFlightShare"]


class InFlightShare:
    """Peers' counts per source, applied to the endpoints of one pool."""

    def __init__(self, endpoints: Callable[[], Sequence[EndpointState]]) -> None:
        self._states: dict[str, EndpointState] = {s.endpoint.key: s for s in endpoints()}
        self._peers: dict[str, dict[str, tuple[int, int]]] = {}
        self._sum: dict[str, list[int]] = {}
        self.heard: dict[str, float] = {}
        """When each peer was last heard of (clock seconds)."""

    @property
    def peers(self) -> frozenset[str]:
        return frozenset(self._peers)

    def counts_of(self, source: str) -> dict[str, tuple[int, int]]:
        """``source``'s latest counts (empty when unknown)."""
        return self._peers.get(source, {})

    def _add(self, key: str, requests: int, tokens: int) -> None:
        if not requests and not tokens:
            return
        total = self._sum.setdefault(key, [0, 0])
        total[0] += requests
        total[1] += tokens
        if total == [0, 0]:
            del self._sum[key]
        state = self._states.get(key)
        if state is not None:
            state.in_flight_requests += requests
            state.in_flight_tokens += tokens

    def apply(self, source: str, counts: Counts, now: float) -> None:
        """``source``'s counts are now ``counts`` (whole: an endpoint left out has none)."""
        old = self._peers.get(source, {})
        new = {key: pair for key, pair in counts.items() if pair != (0, 0)}
        for key, (r, t) in old.items():
            nr, nt = new.get(key, (0, 0))
            self._add(key, nr - r, nt - t)
        for key, (r, t) in new.items():
            if key not in old:
                self._add(key, r, t)
        self._peers[source] = new
        self.heard[source] = now

    def drop(self, source: str) -> None:
        """``source`` is gone: its counts leave the endpoints."""
        for key, (r, t) in self._peers.pop(source, {}).items():
            self._add(key, -r, -t)
        self.heard.pop(source, None)

    def expire(self, now: float, after: float) -> list[str]:
        """Drop the peers not heard of for ``after`` seconds; returns them."""
        gone = [source for source, when in self.heard.items() if now - when > after]
        for source in gone:
            self.drop(source)
        return gone

    def local(self) -> dict[str, tuple[int, int]]:
        """What this picker itself has in flight, per endpoint (zeros left out)."""
        peers = self._sum
        out: dict[str, tuple[int, int]] = {}
        for key, state in self._states.items():
            r, t = state.in_flight_requests, state.in_flight_tokens
            theirs = peers.get(key)
            if theirs is not None:
                r -= theirs[0]
                t -= theirs[1]
            if r or t:
                out[key] = (r, t)
        return out

    def endpoints_changed(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        """Follow the datastore: removals first (a replaced endpoint is in both lists under one key)."""
        for state in removed:
            if self._states.get(state.endpoint.key) is state:
                del self._states[state.endpoint.key]
        for state in added:
            key = state.endpoint.key
            self._states[key] = state
            theirs = self._sum.get(key)
            if theirs is not None:
                state.in_flight_requests += theirs[0]
                state.in_flight_tokens += theirs[1]
