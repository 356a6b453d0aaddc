"""The parent's side of ``--workers``: starts the children, feeds them, carries their records, keeps them running.

Each child (:mod:`epp.workers.child`) talks to the parent over its stdin (the parent's messages) and
stdout (its own), framed as the scrape worker's pipes are (:mod:`epp.datalayer.scrape_wire`). To a
child: ``("setup", ChildSetup)``; per pool, ``("endpoints", key, added, gone)`` and ``("scraped",
key, snapshots, health)`` (the parent's scrape worker's news, :class:`_Tee`), ``("sync", key,
source, records)`` (the other processes' routing records), ``("ready", bool)`` (the parent's
readiness: a child's ext_proc health follows it, so a replica that is not the Lease holder is not
ready in any of its processes); ``("stop", grace)``. From a child:
``("started",)`` once it serves, ``("sync", key, source, records)`` and ``("metrics", families)``.

A child that exits is said (log, ``epp_worker_restarts_total``) and started again after
``restart_delay``, given the endpoints again; meanwhile the others serve its share of new
connections (the kernel gives the port's connections only to listening processes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from epp.clock import Clock
from epp.config.options import ServeOptions
from epp.datalayer.scrape_process import ScrapeProcess
from epp.datalayer.scrape_wire import HealthEvent, read_frame, write_frame
from epp.datastore.store import Datastore
from epp.framework.endpoint import Endpoint, MetricsSnapshot
from epp.framework.plugin import Plugin
from epp.requestcontrol.plugin_series import Readings
from epp.requestcontrol.pool_routing import PoolKey
from epp.statesync.records import Record
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.merged import MergedRegistry, WorkerFamilies
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, CounterValue, Gauge
from epp.workers.pipe_sync import PipeSync

__all__ = ["ChildSetup", "WorkerSeries", "Workers"]

log = logging.getLogger(__name__)

_START_TIMEOUT = 60.0
"""Seconds a child may take to load the configuration, follow the pool and bind the port."""


@dataclass(frozen=True, slots=True)
class ChildSetup:
    """What a child is told first: its number, the parent's options (with the port it bound) and its TLS pair."""

    worker: int
    options: ServeOptions
    tls_pair: tuple[bytes, bytes] | None
    """The parent's certificate and key, PEM, when the port is TLS and not reloaded from files."""


class WorkerSeries:
    """``epp_workers`` and ``epp_worker_restarts_total`` (the parent's); ``epp_worker_streams_total`` (each's)."""

    def __init__(self, metrics: EppMetrics) -> None:
        r = metrics.registry
        self.running = Gauge("epp_workers", "Serving processes of this picker running now (--workers).", registry=r)
        self.restarts = Counter(
            "epp_worker_restarts_total", "Serving child processes that exited and were started again.", registry=r
        )
        self.streams = Counter(
            "epp_worker_streams_total",
            "ext_proc streams each serving process took (--workers > 1): how the kernel spread Envoy's connections.",
            ("worker",),
            registry=r,
        )
        self.index_sizes = Gauge(
            "epp_worker_prefix_index_size",
            "Entries of each prefix index as each serving process holds it (--workers > 1): equal when the "
            "processes agree.",
            ("worker", "plugin_name"),
            registry=r,
        )

    def streams_of(self, worker: int) -> CounterValue:
        return self.streams.labels(worker=str(worker))

    def publish(self, worker: int, plugins: Iterable[object]) -> None:
        """This process's index sizes (before a scrape in the parent, before each push in a child)."""
        for (name, _), entries in Readings.of(plugins).index_sizes.items():
            self.index_sizes.labels(worker=str(worker), plugin_name=name).set(entries)


class _Child:
    __slots__ = ("index", "proc", "reader", "started")

    def __init__(self, index: int) -> None:
        self.index = index
        self.proc: asyncio.subprocess.Process | None = None
        self.reader: asyncio.Task[None] | None = None
        self.started = asyncio.Event()


class _Tee:
    """One pool's scrape news, passed to every child (a :class:`~epp.datalayer.scrape_process.ScrapeTee`)."""

    def __init__(self, workers: Workers, key: PoolKey) -> None:
        self._workers = workers
        self._key = key

    def endpoints_changed(self, added: Sequence[tuple[int, Endpoint]], gone: Sequence[int]) -> None:
        self._workers.broadcast(("endpoints", self._key, list(added), list(gone)))

    def scraped(self, snapshots: Mapping[int, MetricsSnapshot], health: Sequence[HealthEvent]) -> None:
        self._workers.broadcast(("scraped", self._key, dict(snapshots), list(health)))


class Workers:
    """``options.workers - 1`` children serving beside this process; ``start`` / ``stop``."""

    def __init__(self, options: ServeOptions, metrics: EppMetrics, clock: Clock, *, restart_delay: float = 1.0) -> None:
        self.options = options
        self.families = WorkerFamilies()
        self._series = metrics.series(WorkerSeries)
        self._clock = clock
        self._restart_delay = restart_delay
        self._children = [_Child(i) for i in range(1, options.workers)]
        self._syncs: dict[PoolKey, PipeSync] = {}
        self._scrapes: dict[PoolKey, ScrapeProcess] = {}
        self._setup: ChildSetup | None = None
        self._supervisors: list[asyncio.Task[None]] = []
        self._ready = False

    @property
    def pids(self) -> list[int | None]:
        """Each child's process id while it runs (None while it is being replaced)."""
        return [c.proc.pid if c.proc is not None and c.proc.returncode is None else None for c in self._children]

    # -- what the pools hand over (before start) -----------------------------------------------

    def scrapers(self, key: PoolKey, datastore: Datastore) -> None:
        """The parent's pools scrape as the options say (``--workers`` implies the scrape process)."""

    def state_sync(self, key: PoolKey, datastore: Datastore, plugins: Mapping[str, Plugin]) -> PipeSync | None:
        """This process's records of pool ``key``, sent to every child; None with ``--state-sync-address``
        (every process is a replica on the Valkey stream)."""
        if self.options.state_sync is not None:
            return None
        sync = self._syncs[key] = PipeSync(key, datastore, plugins, worker=0, send=self._send_sync, clock=self._clock)
        return sync

    def follow_scrapes(self, key: PoolKey, scrapes: ScrapeProcess) -> None:
        """Pass pool ``key``'s scrape news to every child."""
        self._scrapes[key] = scrapes
        scrapes.tee = _Tee(self, key)

    # -- running -------------------------------------------------------------------------------

    async def start(self, grpc_port: int, tls_pair: tuple[bytes, bytes] | None) -> None:
        """Start every child on the bound ``grpc_port``; return once all serve (raise if one cannot)."""
        self._setup = ChildSetup(0, replace(self.options, grpc_port=grpc_port), tls_pair)
        for child in self._children:
            await self._spawn(child)
        for child in self._children:
            if not await self._started(child):
                raise RuntimeError(f"serving worker {child.index} did not start (see its log above)")
        self._series.running.set(len(self._children) + 1)
        self._supervisors = [
            start_guarded(self._supervise(child), f"epp-worker-{child.index}", forever=True) for child in self._children
        ]
        log.info("serving workers started", extra={"workers": self.options.workers, "grpc_port": grpc_port})

    async def stop(self, grace: float) -> None:
        """Tell every child to stop with ``grace`` for its open streams; kill one still there after it."""
        await cancel_and_wait(self._supervisors)
        self._supervisors = []
        self.broadcast(("stop", grace))
        await asyncio.gather(*(self._end(child, grace + 5.0) for child in self._children))
        self._series.running.set(0)

    def served_metrics(
        self, metrics: EppMetrics, plugins: Callable[[], Iterable[object]]
    ) -> tuple[MergedRegistry, list[Callable[[], None]]]:
        """What ``/metrics`` serves (``metrics`` with the children's series added) and what to do before
        each scrape: publish this process's index sizes, freeze the children's latest families."""
        series = metrics.series(WorkerSeries)
        return MergedRegistry(metrics.registry, self.families), [
            lambda: series.publish(0, plugins()),
            self.families.freeze,
        ]

    def set_ready(self, ready: bool) -> None:
        """The parent's readiness changed: the children's follows."""
        self._ready = ready
        self.broadcast(("ready", ready))

    def broadcast(self, message: tuple[object, ...], *, skip: int = -1) -> None:
        for child in self._children:
            if child.index != skip:
                self._tell(child, message)

    # -- inside --------------------------------------------------------------------------------

    def _send_sync(self, key: PoolKey, source: str, records: list[Record]) -> None:
        self.broadcast(("sync", key, source, records))

    def _tell(self, child: _Child, message: tuple[object, ...]) -> None:
        proc = child.proc
        if proc is None or proc.stdin is None or proc.returncode is not None or proc.stdin.is_closing():
            return  # gone, or being stopped
        if not child.started.is_set():
            return  # not serving yet: it is given the endpoints when it says it started
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            write_frame(proc.stdin, message)

    async def _spawn(self, child: _Child) -> None:
        assert self._setup is not None
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "epp.workers.child", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE
        )
        assert proc.stdin is not None
        child.proc, child.started = proc, asyncio.Event()
        write_frame(proc.stdin, ("setup", replace(self._setup, worker=child.index)))
        child.reader = start_guarded(self._read(child, proc), f"epp-worker-{child.index}-reader")

    async def _started(self, child: _Child) -> bool:
        """Whether ``child`` said it serves before it ended or :data:`_START_TIMEOUT` passed."""
        assert child.reader is not None
        waiting = start_guarded(child.started.wait(), f"epp-worker-{child.index}-starting", quiet=True)
        try:
            await asyncio.wait((waiting, child.reader), timeout=_START_TIMEOUT, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiting.cancel()
        return child.started.is_set()

    def _on_started(self, child: _Child) -> None:
        child.started.set()
        self._tell(child, ("ready", self._ready))
        for key, scrapes in self._scrapes.items():
            self._tell(child, ("endpoints", key, scrapes.table(), []))
        log.info("serving worker started", extra={"worker": child.index, "pid": child.proc.pid if child.proc else None})

    async def _read(self, child: _Child, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        try:
            while (message := await read_frame(proc.stdout)) is not None:
                kind = message[0]
                if kind == "sync":
                    _, key, source, records = message
                    sync = self._syncs.get(key)
                    if sync is not None:
                        sync.receive(source, records)
                    self.broadcast(message, skip=child.index)
                elif kind == "metrics":
                    self.families.update(child.index, message[1])
                elif kind == "started":
                    self._on_started(child)
                else:
                    raise ValueError(f"serving worker {child.index} sent {kind!r}")
        except ValueError:
            log.exception("serving worker %d: broken pipe protocol; stopping it", child.index)
            proc.kill()

    async def _supervise(self, child: _Child) -> None:
        """Wait for the child's end; unless stopping, say so and start another."""
        while True:
            assert child.proc is not None and child.reader is not None
            code = await child.proc.wait()
            await cancel_and_wait(child.reader)
            self.families.retire(child.index)
            log.error("serving worker exited; starting another", extra={"worker": child.index, "code": code})
            self._series.running.dec()
            self._series.restarts.inc()
            await self._clock.sleep(self._restart_delay)
            await self._spawn(child)
            if await self._started(child):
                self._series.running.inc()
            elif child.proc is not None and child.proc.returncode is None:
                child.proc.kill()  # hung while starting: its end is handled as an exit

    async def _end(self, child: _Child, timeout: float) -> None:
        proc = child.proc
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            async with asyncio.timeout(timeout):
                await proc.wait()
        except TimeoutError:
            log.error("serving worker did not stop; killing it", extra={"worker": child.index, "pid": proc.pid})
            proc.kill()
            await proc.wait()
        await cancel_and_wait(child.reader)
