"""One pool's side of the state sync: what its plugins and its in-flight counts send, and what it applies.

A :class:`PoolSync` sits between a pool's routing and the link that carries its records (the
replicas' Valkey stream, :mod:`epp.statesync.valkey`). Outgoing: every
:class:`~epp.framework.replication.Replicated` plugin of the configuration in force publishes into
one bounded outbox (the request path only appends; the link drains it off the hot path), and
:meth:`in_flight_due` says when this picker's own in-flight counts changed enough to go out.
Incoming: :meth:`receive` hands each plugin record to the plugin of that name and folds in-flight
records into the endpoints (:class:`~epp.statesync.inflight.InFlightShare`).
"""

from __future__ import annotations

import functools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import Plugin
from epp.framework.replication import Replicated
from epp.statesync.inflight import InFlightShare
from epp.statesync.records import IN_FLIGHT, PLUGIN, Record, in_flight_record

__all__ = ["BatchSchedule", "PoolSync", "SyncCounts"]

log = logging.getLogger(__name__)


class SyncCounts:
    """What a pool's sync has done; read by its metrics and the API."""

    __slots__ = ("dropped_full", "dropped_unknown", "received", "sent", "undecodable")

    def __init__(self) -> None:
        self.sent = 0
        self.received = 0
        self.dropped_full = 0
        """Records dropped because the outbox was full (a link down for long)."""
        self.dropped_unknown = 0
        """Records for a plugin this picker's configuration does not have."""
        self.undecodable = 0


class PoolSync:
    """The records of one pool; ``source`` names this picker to its peers."""

    def __init__(
        self,
        source: str,
        endpoints: Callable[[], Sequence[EndpointState]],
        *,
        max_outbox: int = 100_000,
    ) -> None:
        self.source = source
        self.in_flight = InFlightShare(endpoints)
        self.counts = SyncCounts()
        self._outbox: deque[Record] = deque()
        self._max_outbox = max_outbox
        self._plugins: dict[str, Replicated] = {}
        self._last_counts: dict[str, tuple[int, int]] = {}

    # -- plugins ---------------------------------------------------------------------------------

    def bind(self, plugins: Mapping[str, Plugin]) -> None:
        """Bind the configuration's replicated plugins (those of the previous one are unbound)."""
        for plugin in self._plugins.values():
            plugin.replicate(None)
        self._plugins = {name: p for name, p in plugins.items() if isinstance(p, Replicated)}
        for name, plugin in self._plugins.items():
            plugin.replicate(functools.partial(self._publish, name))

    def unbind(self) -> None:
        self.bind({})

    def _publish(self, topic: str, payload: bytes) -> None:
        self.queue((PLUGIN, topic, payload))

    def queue(self, record: Record) -> None:
        """Send ``record`` with the next batch (the oldest queued record goes when the outbox is full)."""
        outbox = self._outbox
        if len(outbox) >= self._max_outbox:
            outbox.popleft()
            self.counts.dropped_full += 1
        outbox.append(record)

    # -- outgoing -----------------------------------------------------------------------------------

    def take(self, limit: int = 1000) -> list[Record]:
        """Up to ``limit`` queued records, oldest first."""
        outbox = self._outbox
        n = min(limit, len(outbox))
        taken = [outbox.popleft() for _ in range(n)]
        self.counts.sent += n
        return taken

    def requeue(self, records: Sequence[Record]) -> None:
        """Records a link could not send go back to the front, in order (bounded as :meth:`queue`)."""
        self.counts.sent -= len(records)
        outbox = self._outbox
        outbox.extendleft(reversed(records))
        while len(outbox) > self._max_outbox:
            outbox.pop()
            self.counts.dropped_full += 1

    @property
    def pending(self) -> int:
        return len(self._outbox)

    def in_flight_due(self, heartbeat: bool) -> dict[str, tuple[int, int]] | None:
        """This picker's counts when they changed since the last ones sent (or ``heartbeat``), else None."""
        counts = self.in_flight.local()
        if counts == self._last_counts and not heartbeat:
            return None
        self._last_counts = counts
        return counts

    # -- incoming -----------------------------------------------------------------------------------

    def receive(self, source: str, records: Iterable[Record], now: float) -> None:
        """Apply ``source``'s records in order."""
        for kind, topic, body in records:
            self.counts.received += 1
            if kind == IN_FLIGHT:
                self.in_flight.apply(source, body, now)
                continue
            plugin = self._plugins.get(topic) if kind == PLUGIN else None
            if plugin is None:
                self.counts.dropped_unknown += 1
                continue
            try:
                plugin.apply_replicated(body)
            except ValueError as e:
                self.counts.undecodable += 1
                log.warning("state-sync payload refused", extra={"plugin": topic, "source": source, "error": str(e)})


class BatchSchedule:
    """What a link sends at each flush tick: the outbox, and the in-flight counts on their own interval.

    The counts go out every ``interval`` when they changed, and every ``heartbeat_intervals`` of them
    when not (so peers know this picker is alive); peers silent for ``expiry`` seconds are forgotten.
    Every link (the replicas' Valkey stream, the ``--workers`` pipes) sends what this decides.
    """

    def __init__(self, sync: PoolSync, *, interval: float, heartbeat_intervals: int, expiry: float, now: float) -> None:
        self.sync = sync
        self._interval = interval
        self._heartbeat = interval * heartbeat_intervals
        self._expiry = expiry
        self._next_counts = self._next_heartbeat = now

    def due(self, now: float) -> list[Record]:
        """The records to send now (empty: nothing to send this tick)."""
        sync = self.sync
        sync.in_flight.expire(now, self._expiry)
        records = sync.take()
        if now >= self._next_counts:
            self._next_counts = now + self._interval
            counts = sync.in_flight_due(now >= self._next_heartbeat)
            if counts is not None:
                records.append(in_flight_record(counts))
                self._next_heartbeat = now + self._heartbeat
        return records

    def failed(self, records: Sequence[Record], now: float) -> None:
        """``records`` could not be sent: plugin records go back to the outbox; fresh counts go at the next tick."""
        self.sync.requeue([r for r in records if r[0] != IN_FLIGHT])
        self._next_counts = self._next_heartbeat = now
