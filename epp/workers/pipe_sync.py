"""One pool's shared routing state between the processes of one pod (``--workers``), through the parent.

The same records replicas exchange over Valkey (:mod:`epp.statesync`): replicated plugins'
changes (approximate-prefix insertions) and in-flight counts, held in a
:class:`~epp.statesync.pool_sync.PoolSync` per process and pool. Each flush tick a process hands
what :class:`~epp.statesync.pool_sync.BatchSchedule` says is due to ``send``: a child writes it to
its parent, the parent to every child; the parent also passes each child's batch on to the other
children (:class:`~epp.workers.supervisor.Workers`). A pipe to the parent is not lost while both
live (a child whose parent dies stops), so there is no link health to report; a child that dies
stops sending, and its in-flight counts expire after :data:`EXPIRY` in the others.
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import Callable, Mapping, Sequence

from epp.clock import Clock
from epp.datastore.store import Datastore
from epp.framework.plugin import Plugin
from epp.requestcontrol.pool_routing import PoolKey
from epp.statesync.pool_sync import BatchSchedule, PoolSync
from epp.statesync.records import Record
from epp.tasks import cancel_and_wait, start_guarded

__all__ = ["EXPIRY", "PipeSync", "Send"]

FLUSH = 0.002
"""Seconds between flush ticks: a pipe write is cheap, and a prefix insertion should reach the other
workers before the conversation's next turn does."""
IN_FLIGHT_INTERVAL = 0.05
HEARTBEAT_INTERVALS = 5
EXPIRY = 1.0
"""A worker not heard of for this long is gone: its in-flight counts no longer count."""

Send = Callable[[PoolKey, str, list[Record]], None]
"""(pool, source, records): where a process's due batch goes."""


class PipeSync:
    """A pool's records in one process of the pod; ``start`` / ``stop`` its flush task."""

    def __init__(
        self,
        key: PoolKey,
        datastore: Datastore,
        plugins: Mapping[str, Plugin],
        *,
        worker: int,
        send: Send,
        clock: Clock,
    ) -> None:
        self.key = key
        self.sync = PoolSync(f"worker-{worker}-{secrets.token_hex(4)}", datastore.endpoints)
        self.sync.bind(plugins)
        self._send = send
        self._clock = clock
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe = datastore.subscribe(self.sync.in_flight.endpoints_changed)

    def bind(self, plugins: Mapping[str, Plugin]) -> None:
        """A reloaded configuration's plugins take over publishing and applying."""
        self.sync.bind(plugins)

    def receive(self, source: str, records: Sequence[Record]) -> None:
        """Another process's batch."""
        if source != self.sync.source:
            self.sync.receive(source, records, self._clock.now())

    async def start(self) -> None:
        if self._task is None:
            self._task = start_guarded(self._flush(), f"epp-worker-sync-{self.key[1]}", forever=True)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._unsubscribe()
        self.sync.unbind()

    def refresh(self) -> None:
        """Nothing to copy: the ``epp_state_sync_*`` series describe the replicas' Valkey link."""

    def report_health(self, set_detail: Callable[[str, bool], None]) -> None:
        """Nothing to report: the pipe lives as long as this process (see the module)."""

    async def _flush(self) -> None:
        clock, sync = self._clock, self.sync
        schedule = BatchSchedule(
            sync, interval=IN_FLIGHT_INTERVAL, heartbeat_intervals=HEARTBEAT_INTERVALS, expiry=EXPIRY, now=clock.now()
        )
        while True:
            await clock.sleep(FLUSH)
            records = schedule.due(clock.now())
            if records:
                self._send(self.key, sync.source, records)
