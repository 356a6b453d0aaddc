"""A ``--workers`` child: serves the ext_proc port beside its parent, on the parent's scrapes and records.

Run by the parent as ``python -m epp.workers.child`` (see :mod:`epp.workers.supervisor` for the
messages). It builds the same :class:`~epp.runtime.Runtime` from the parent's options, as
:class:`ChildRole` wires it: the pools follow the cluster themselves, but their scrapers are a
:class:`~epp.workers.scrape_feed.ScrapeFeed` and their records go through the parent
(:class:`~epp.workers.pipe_sync.PipeSync`, unless ``--state-sync-address`` makes every process a
replica on Valkey); no health, metrics or API port, no Lease (the pod's are the parent's). Its
request-path series go to the parent every :data:`~epp.telemetry.merged.PUSH_INTERVAL`.
It stops when told (``stop``, with the grace for open streams) or when its stdin ends (the parent died).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from epp.clock import Clock, SystemClock
from epp.datalayer.scrape_wire import read_frame, run_child, write_frame
from epp.datalayer.scraper import Scrapers
from epp.datastore.store import Datastore
from epp.framework.plugin import Plugin
from epp.requestcontrol.pool_routing import PoolKey
from epp.statesync.records import Record
from epp.telemetry.merged import PUSH_INTERVAL, families_of
from epp.workers.pipe_sync import PipeSync
from epp.workers.scrape_feed import ScrapeFeed
from epp.workers.supervisor import ChildSetup, WorkerSeries

if TYPE_CHECKING:
    from epp.runtime import Runtime

__all__ = ["ChildRole", "main"]


class _WorkerField(logging.Filter):
    """Every line of a child names it (``worker=N``): the pod's log interleaves all its processes."""

    def __init__(self, worker: int) -> None:
        super().__init__()
        self._worker = worker

    def filter(self, record: logging.LogRecord) -> bool:
        record.worker = self._worker
        return True


class ChildRole:
    """How a child's runtime differs: its pools' scrapers and records, its number, its TLS pair."""

    def __init__(self, setup: ChildSetup, out: asyncio.WriteTransport, clock: Clock) -> None:
        self.worker = setup.worker
        self.tls_pair = setup.tls_pair
        self._out = out
        self._clock = clock
        self._valkey = setup.options.state_sync is not None
        self.parent_ready = False
        """The parent's readiness, as last told (this process is ready only with it)."""
        self.feeds: dict[PoolKey, ScrapeFeed] = {}
        self.syncs: dict[PoolKey, PipeSync] = {}

    def scrapers(self, key: PoolKey, datastore: Datastore) -> Scrapers:
        feed = self.feeds[key] = ScrapeFeed(datastore)
        return feed

    def state_sync(self, key: PoolKey, datastore: Datastore, plugins: Mapping[str, Plugin]) -> PipeSync | None:
        """Records through the parent; None with ``--state-sync-address`` (this process is a replica on Valkey)."""
        if self._valkey:
            return None
        sync = self.syncs[key] = PipeSync(
            key, datastore, plugins, worker=self.worker, send=self._send_sync, clock=self._clock
        )
        return sync

    def _send_sync(self, key: PoolKey, source: str, records: list[Record]) -> None:
        self.send(("sync", key, source, records))

    def send(self, message: tuple[object, ...]) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            write_frame(self._out, message)

    def deliver(self, message: tuple[Any, ...]) -> float | None:
        """Apply one message of the parent; the grace for open streams when it says stop, else None."""
        kind = message[0]
        if kind == "scraped":
            _, key, snapshots, health = message
            if (feed := self.feeds.get(key)) is not None:
                feed.scraped_results(snapshots, health)
        elif kind == "endpoints":
            _, key, added, gone = message
            if (feed := self.feeds.get(key)) is not None:
                feed.endpoints_changed(added, gone)
        elif kind == "sync":
            _, key, source, records = message
            if (sync := self.syncs.get(key)) is not None:
                sync.receive(source, records)
        elif kind == "ready":
            self.parent_ready = bool(message[1])
        elif kind == "stop":
            return float(message[1])
        else:
            raise ValueError(f"serving worker: unknown message {kind!r}")
        return None


def _push_metrics(role: ChildRole, runtime: Runtime, names: frozenset[str]) -> None:
    runtime.metrics.series(WorkerSeries).publish(role.worker, runtime.plugins())
    role.send(("metrics", families_of(runtime.metrics.registry, names)))


async def _push_metrics_forever(role: ChildRole, runtime: Runtime, names: frozenset[str]) -> None:
    while True:
        await asyncio.sleep(PUSH_INTERVAL)
        _push_metrics(role, runtime, names)


async def _serve(reader: asyncio.StreamReader, out: asyncio.WriteTransport) -> None:
    from epp.picker_series import worker_family_names
    from epp.runtime import Runtime
    from epp.tasks import cancel_and_wait, start_guarded
    from epp.telemetry.logs import setup_logging

    first = await read_frame(reader)
    if first is None:
        return
    if first[0] != "setup" or not isinstance(first[1], ChildSetup):
        raise ValueError(f"serving worker: expected setup first, got {first[0]!r}")
    setup: ChildSetup = first[1]
    setup_logging(setup.options.logging).addFilter(_WorkerField(setup.worker))
    clock = SystemClock()
    role = ChildRole(setup, out, clock)
    runtime = Runtime(setup.options, clock=clock, child=role)
    names = worker_family_names(setup.options.metrics_naming)
    grace = 0.0
    pusher = None
    try:
        await runtime.start()
        gc.freeze()
        role.send(("started",))
        pusher = start_guarded(_push_metrics_forever(role, runtime, names), "epp-worker-metrics", forever=True)
        while (message := await read_frame(reader)) is not None:
            stop = role.deliver(message)
            if stop is not None:
                grace = stop
                break
    finally:
        await runtime.stop(grace)
        await cancel_and_wait(pusher)
        _push_metrics(role, runtime, names)


def main() -> int:
    """Entry point of a serving child: the parent decides when it stops (stdin's end), not a signal."""
    return run_child(_serve, ignore=(signal.SIGINT, signal.SIGTERM))


if __name__ == "__main__":
    sys.exit(main())
