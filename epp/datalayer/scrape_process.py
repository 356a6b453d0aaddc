"""Scraping in a child process: the picker's side of the scrape worker (``--metrics-scrape-process``).

In the serving process every scrape is a handful of event-loop steps (a timer, a write, reads,
a parse), and a request's steps queue behind them: with hundreds of endpoints every 50 ms the
loop spends most of its time scraping, and a request waits behind a whole round of scrape steps
at each of its own. :class:`ScrapeProcess` moves all of that into
:mod:`epp.datalayer.scrape_worker`, a child running the same
:class:`~epp.datalayer.scraper.ScraperManager`; the serving loop only sends it the endpoints
(following the datastore, as the in-process manager does) and the scrape spec on each
configuration reload, and applies its batches: a new snapshot per endpoint (one reference
assignment, as in process), the health calls the scraper made, and the scrape metrics' deltas.

Endpoints are numbered as they are sent, so a batch about an endpoint that has since been
replaced or removed is dropped, not applied to its successor. If the worker dies, it is said
(log, ``epp_scrape_worker_restarts_total``), and a new one is started after ``restart_delay``
and given every endpoint; meanwhile the endpoints' metrics age, which staleness sees. The
worker reads the system's monotonic clock: the injected clock must be the system clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import logging
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from epp.clock import Clock
from epp.config.options import LoggingOptions
from epp.datalayer.scrape_wire import Batch, HealthEvent, Setup, read_frame, write_frame
from epp.datalayer.scraper import EndpointSource, ScraperManager, Scrapers, ScrapeSeries
from epp.framework.datalayer import ScrapeSpec
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.metrics import EppMetrics

__all__ = ["ScrapeProcess", "ScrapeTee", "apply_scrape_results", "make_scrapers"]

_log = logging.getLogger(__name__)

_HEALTH_CALLS = frozenset({"scrape_ok", "unreachable", "scrape_failed"})


class ScrapeTee(Protocol):
    """Told what the worker is asked to scrape and what it found (``--workers``: the serving children's feed)."""

    def endpoints_changed(self, added: Sequence[tuple[int, Endpoint]], gone: Sequence[int]) -> None: ...

    def scraped(self, snapshots: Mapping[int, MetricsSnapshot], health: Sequence[HealthEvent]) -> None: ...


def apply_scrape_results(
    state_of: Callable[[int], EndpointState | None],
    snapshots: Mapping[int, MetricsSnapshot],
    health: Iterable[HealthEvent],
) -> None:
    """Each endpoint's new snapshot, then the health calls the scraper made, in order (ids ``state_of`` knows)."""
    for eid, snapshot in snapshots.items():
        state = state_of(eid)
        if state is not None:
            state.metrics = snapshot
    for eid, method, args in health:
        state = state_of(eid)
        if state is not None and method in _HEALTH_CALLS:
            getattr(state.health, method)(*args)


class ScrapeProcess:
    """Scrapes every datastore endpoint from a worker process; the same interface as ScraperManager."""

    def __init__(
        self,
        datastore: EndpointSource,
        clock: Clock,
        metrics: EppMetrics,
        *,
        interval: float = 0.05,
        timeout: float = 1.0,
        max_backoff: float = 2.0,
        spec: ScrapeSpec | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
        logging_options: LoggingOptions | None = None,
        flush_interval: float = 0.005,
        restart_delay: float = 1.0,
    ) -> None:
        if interval <= 0 or timeout <= 0 or max_backoff < interval or flush_interval <= 0:
            raise ValueError(
                f"scrape interval ({interval}), timeout ({timeout}) and flush interval ({flush_interval}) must be "
                f"> 0 and max_backoff ({max_backoff}) >= interval"
            )
        self._datastore = datastore
        self._clock = clock
        self._metrics = metrics.series(ScrapeSeries)
        self._setup = Setup(
            interval, timeout, max_backoff, max_body_bytes, flush_interval, logging_options or LoggingOptions()
        )
        self._spec = spec or ScrapeSpec()
        self._restart_delay = restart_delay
        self._ids = itertools.count(1)
        self._states: dict[int, EndpointState] = {}
        self._by_key: dict[str, int] = {}
        self._proc: asyncio.subprocess.Process | None = None
        self._task: asyncio.Task[None] | None = None
        self._unsubscribe: Callable[[], None] | None = None
        self.tee: ScrapeTee | None = None
        """Told every change of the endpoints and every batch, after they are applied here."""

    def table(self) -> list[tuple[int, Endpoint]]:
        """Every endpoint scraped now, with its id (what a new :attr:`tee` reader starts from)."""
        return [(eid, state.endpoint) for eid, state in self._states.items()]

    @property
    def scraped(self) -> frozenset[str]:
        """Keys of the endpoints being scraped now."""
        return frozenset(self._by_key)

    @property
    def pid(self) -> int | None:
        """The worker's process id while one runs."""
        return self._proc.pid if self._proc is not None and self._proc.returncode is None else None

    async def start(self) -> None:
        """Start the worker, scrape every current endpoint and follow the datastore's changes."""
        if self._unsubscribe is not None:
            return
        self._unsubscribe = self._datastore.subscribe(self._on_change)
        self._on_change(self._datastore.endpoints(), ())
        try:
            first = await self._spawn()
        except BaseException:  # no worker: say so at start, and follow nothing
            await self.stop()
            raise
        self._task = start_guarded(self._supervise(first), "epp-scrape-process", forever=True)

    def apply(self, spec: ScrapeSpec | None) -> None:
        """Scrape by ``spec`` (None: the default) from now on (a configuration reload)."""
        spec = spec or ScrapeSpec()
        if spec == self._spec:
            return
        self._spec = spec
        self._send(("spec", dataclasses.replace(spec, tls=None)))

    async def stop(self) -> None:
        """Stop following the datastore; end the worker (closing its stdin) and wait for it."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        task, self._task = self._task, None
        await cancel_and_wait(task)
        self._states.clear()
        self._by_key.clear()

    def _on_change(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        gone = []
        for state in removed:  # removals first: a replaced endpoint arrives in both lists under one key
            eid = self._by_key.get(state.endpoint.key)
            if eid is not None and self._states[eid] is state:
                del self._states[eid], self._by_key[state.endpoint.key]
                gone.append(eid)
        new = []
        for state in added:
            old = self._by_key.get(state.endpoint.key)
            if old is not None:
                del self._states[old]
                gone.append(old)
            eid = next(self._ids)
            self._states[eid], self._by_key[state.endpoint.key] = state, eid
            new.append((eid, state.endpoint))
        if new or gone:
            self._send(("change", new, gone))
            if self.tee is not None:
                self.tee.endpoints_changed(new, gone)

    def _send(self, message: tuple[object, ...]) -> None:
        proc = self._proc
        if proc is None or proc.stdin is None or proc.returncode is not None:
            return  # no worker now: the next one is given the whole state when it starts
        # A worker that is gone: the supervisor sees its end and gives the next one everything.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            write_frame(proc.stdin, message)

    async def _supervise(self, proc: asyncio.subprocess.Process | None) -> None:
        """Read the worker's batches; when it ends, say so and start another (``proc``: the first)."""
        while True:
            try:
                if proc is None:
                    proc = await self._spawn()
                await self._read(proc)
            except asyncio.CancelledError:
                raise
            except Exception:  # task boundary: a broken worker or pipe costs a restart, never the picker
                _log.exception("Scrape worker failed")
            finally:
                if proc is not None:
                    self._proc = None
                    await _end(proc)
            proc = None
            self._metrics.worker_restarts.inc()
            await self._clock.sleep(self._restart_delay)

    async def _spawn(self) -> asyncio.subprocess.Process:
        """A new worker, given the settings, the spec and every endpoint."""
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "epp.datalayer.scrape_worker",
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
        )
        assert proc.stdin is not None
        self._proc = proc
        write_frame(proc.stdin, ("setup", self._setup))
        write_frame(proc.stdin, ("spec", dataclasses.replace(self._spec, tls=None)))
        write_frame(proc.stdin, ("change", [(eid, s.endpoint) for eid, s in self._states.items()], []))
        _log.info("Scrape worker started", extra={"pid": proc.pid, "endpoints": len(self._states)})
        return proc

    async def _read(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while (message := await read_frame(proc.stdout)) is not None:
            if message[0] != "batch" or not isinstance(message[1], Batch):
                raise ValueError(f"scrape worker sent {message[0]!r}, not a batch")
            self._apply(message[1])
        _log.error("Scrape worker exited", extra={"pid": proc.pid, "code": await proc.wait()})

    def _apply(self, batch: Batch) -> None:
        apply_scrape_results(self._states.get, batch.snapshots, batch.health)
        if self.tee is not None:
            self.tee.scraped(batch.snapshots, batch.health)
        m = self._metrics
        for engine, (counts, total) in batch.durations.items():
            m.duration.labels(engine=engine).add(counts, total)
        for engine, (counts, total) in batch.intervals.items():
            m.interval.labels(engine=engine).add(counts, total)
        for reason, count in batch.errors.items():
            m.errors.labels(reason=reason).inc(count)


async def _end(proc: asyncio.subprocess.Process) -> None:
    """Close the worker's stdin (it stops when its input ends); kill it if it does not within 5 s."""
    if proc.stdin is not None:
        proc.stdin.close()
    try:
        async with asyncio.timeout(5.0):
            await proc.wait()
    except TimeoutError:
        _log.error("Scrape worker did not stop; killing it", extra={"pid": proc.pid})
        proc.kill()
        await proc.wait()


def make_scrapers(
    datastore: EndpointSource,
    clock: Clock,
    metrics: EppMetrics,
    *,
    interval: float,
    spec: ScrapeSpec | None,
    worker_process: bool,
    logging_options: LoggingOptions,
) -> Scrapers:
    """The pool's scrapers: on the serving loop, or in a worker process (``--metrics-scrape-process``)."""
    if worker_process:
        return ScrapeProcess(datastore, clock, metrics, interval=interval, spec=spec, logging_options=logging_options)
    return ScraperManager(datastore, clock, metrics, interval=interval, spec=spec)
