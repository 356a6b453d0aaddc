"""One poll task per endpoint: fetch ``/metrics``, parse, swap in a new :class:`MetricsSnapshot`.

Scrapers follow the datastore: a task starts when an endpoint is added and is cancelled when it
is removed (or replaced), so removing an endpoint frees everything it held. Each poll has its own
deadline and each endpoint its own task, so a dead or hanging server only delays itself; failures
keep the last metrics (their age grows, which staleness checks see), are counted in
``epp_scrape_errors_total{reason}`` and back off exponentially up to ``max_backoff``. The interval
runs from the start of one poll to the start of the next (as upstream's ticker), so a slow answer
does not stretch it, but the wait is never under half the interval, so an event loop that cannot
keep up gets fewer scrapes rather than a backlog of them; the interval each endpoint achieves is kept in its
snapshot and observed in ``epp_scrape_interval_seconds``. Each endpoint polls at once when it
appears, then at its own phase of the interval (:func:`scrape_phase`, from its key): endpoints
added together (a start, a relist, a scale-up by hundreds) would otherwise be polled in one burst
every interval, and a request arriving during the burst would wait behind all of it. Each
outcome also feeds the endpoint's health (:mod:`epp.framework.health`): a refused or reset
connection makes it unreachable at once, a timeout or a non-200 suspect, a good scrape healthy.

What to scrape is a :class:`~epp.framework.datalayer.ScrapeSpec` (the configuration's
``metrics-data-source`` and ``core-metrics-extractor`` over GIE's flags): scheme and TLS (one
context for all endpoints), path, port, interval, and the engine maps, each endpoint read with
its engine label's. :meth:`ScraperManager.apply` swaps it when the configuration reloads: if the
transport changed, every task is replaced, so each endpoint gets a new connection of the new
kind; otherwise the running tasks pick up the new maps at once and the new interval after their
current wait. The endpoint's metrics port (``--model-server-metrics-port``) is the datastore's
business, unless the source's ``port`` overrides it.

The request path never waits on a scrape: a poll ends with one reference assignment,
``state.metrics = snapshot``, which a scheduling cycle reads whole or not at all. Intervals are
waited on the injected clock, so tests drive the loop with ``ManualClock``. The poll tasks are
held by the manager's :class:`~epp.tasks.TaskSet` until they have finished, cancelled ones too.
:class:`ScrapeSeries` declares the scrape series.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from epp.clock import Clock
from epp.datalayer.engines import read
from epp.datalayer.metrics_fetch import FetchError, MetricsConnection
from epp.datalayer.promtext import PageMemo
from epp.datalayer.scrape_spec import effective_interval
from epp.datastore.types import EndpointListener
from epp.framework.datalayer import ScrapeSpec
from epp.framework.endpoint import EndpointState
from epp.framework.engine_metrics import EngineSpec
from epp.tasks import TaskSet
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Histogram

__all__ = ["EndpointSource", "ScrapeSeries", "ScraperManager", "Scrapers", "scrape_phase"]

_log = logging.getLogger(__name__)

_REASONS = ("timeout", "http", "connect", "parse")
_SCRAPE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)
_SCRAPE_INTERVAL_BUCKETS = (0.025, 0.05, 0.055, 0.06, 0.0667, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0)


class ScrapeSeries:
    """Ours (upstream has no scrape series): each scrape's duration and the interval achieved, by engine;
    failures by reason; restarts of the scrape worker process."""

    def __init__(self, metrics: EppMetrics) -> None:
        self.duration = Histogram(
            "epp_scrape_duration_seconds",
            "Time to fetch and parse one model server's /metrics.",
            ("engine",),
            buckets=_SCRAPE_BUCKETS,
            registry=metrics.registry,
        )
        self.interval = Histogram(
            "epp_scrape_interval_seconds",
            "Seconds between two successful scrapes of the same model server (the interval achieved).",
            ("engine",),
            buckets=_SCRAPE_INTERVAL_BUCKETS,
            registry=metrics.registry,
        )
        self.worker_restarts = Counter(
            "epp_scrape_worker_restarts_total",
            "Times the scrape worker process (--metrics-scrape-process) ended and was started again.",
            registry=metrics.registry,
        )
        self.errors = Counter(
            "epp_scrape_errors_total",
            "Failed /metrics scrapes of model servers, by reason (timeout, http, connect, parse).",
            ("reason",),
            registry=metrics.registry,
        )


def scrape_phase(key: str, interval: float) -> float:
    """How far into the interval ``key``'s endpoint polls: stable per key, spread evenly over many keys."""
    return zlib.crc32(key.encode()) / 2**32 * interval


class EndpointSource(Protocol):
    """What the scrapers need of the datastore."""

    def endpoints(self) -> Sequence[EndpointState]: ...

    def subscribe(self, listener: EndpointListener) -> Callable[[], None]: ...


class Scrapers(Protocol):
    """What the runtime starts, reconfigures and stops: :class:`ScraperManager` here, or the scrape worker."""

    @property
    def scraped(self) -> frozenset[str]: ...

    async def start(self) -> None: ...

    def apply(self, spec: ScrapeSpec | None) -> None: ...

    async def stop(self) -> None: ...


class _ScrapeError(Exception):
    """A failed poll: ``reason`` is the ``epp_scrape_errors_total`` label; ``unreachable`` as FetchError's."""

    def __init__(self, reason: str, detail: str, *, unreachable: bool = False) -> None:
        super().__init__(detail)
        self.reason = reason
        self.unreachable = unreachable


@dataclass(slots=True)
class _Target:
    """Per-endpoint poll state, owned by its task."""

    state: EndpointState
    engine: EngineSpec
    conn: MetricsConnection
    memo: PageMemo
    failures: int = 0
    problem: str = ""  # last logged problem, so a persistent one is logged once, not 20 times a second


class ScraperManager:
    """Starts, runs and stops one scrape task per datastore endpoint."""

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
        phase: Callable[[str, float], float] = scrape_phase,
    ) -> None:
        """``interval``: the base tick (``--refresh-metrics-interval``) the spec's interval is rounded to;
        ``spec``: what to scrape (default: plain HTTP ``/metrics``, the built-in engines); ``phase``:
        each endpoint's offset into the interval (tests that count ticks pass one that is always 0)."""
        if interval <= 0 or timeout <= 0 or max_backoff < interval:
            raise ValueError(
                f"scrape interval ({interval}) and timeout ({timeout}) must be > 0 "
                f"and max_backoff ({max_backoff}) >= interval"
            )
        self._datastore = datastore
        self._clock = clock
        self._metrics = metrics.series(ScrapeSeries)
        self._base_interval = interval
        self._timeout = timeout
        self._max_backoff = max_backoff
        self._spec = spec or ScrapeSpec()
        self._interval = self._effective_interval()
        self._max_body = max_body_bytes
        self._phase = phase
        self._errors = {reason: self._metrics.errors.labels(reason=reason) for reason in _REASONS}
        self._tasks: dict[str, tuple[_Target, asyncio.Task[None]]] = {}
        self._running = TaskSet()
        self._unsubscribe: Callable[[], None] | None = None

    @property
    def scraped(self) -> frozenset[str]:
        """Keys of the endpoints being scraped now."""
        return frozenset(self._tasks)

    async def start(self) -> None:
        """Scrape every current endpoint and follow the datastore's changes."""
        if self._unsubscribe is not None:
            return
        self._unsubscribe = self._datastore.subscribe(self._on_change)
        self._on_change(self._datastore.endpoints(), ())

    def apply(self, spec: ScrapeSpec | None) -> None:
        """Scrape by ``spec`` (None: the default) from now on (a configuration reload); on the event loop.

        A changed transport replaces every task and with it every connection; otherwise the
        running tasks read each endpoint with its engine's new map from their next poll.
        """
        old, self._spec = self._spec, spec or ScrapeSpec()
        if self._spec == old:
            return
        self._interval = self._effective_interval()
        if self._spec.transport != old.transport:
            self._on_change([target.state for target, _ in self._tasks.values()], ())
            return
        for target, _ in self._tasks.values():
            target.engine = self._engine(target.state)

    def _effective_interval(self) -> float:
        requested = self._spec.interval
        interval = effective_interval(requested, self._base_interval)
        if requested and interval != requested:
            _log.info(
                "Scrape interval rounded to the nearest multiple of the base tick",
                extra={"requested": requested, "effective": interval, "base": self._base_interval},
            )
        return interval

    async def stop(self) -> None:
        """Stop following the datastore; cancel every scrape task and wait for them to end."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        self._tasks.clear()
        await self._running.stop()

    def _on_change(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        # Removals first: a replaced endpoint arrives in both lists under the same key.
        for state in removed:
            entry = self._tasks.get(state.endpoint.key)
            if entry is not None and entry[0].state is state:
                del self._tasks[state.endpoint.key]
                entry[1].cancel()
        for state in added:
            key = state.endpoint.key
            previous = self._tasks.pop(key, None)
            if previous is not None:
                previous[1].cancel()
            target = self._target(state)
            self._tasks[key] = (target, self._running.start(self._poll(target), f"epp-scrape:{key}", forever=True))

    def _engine(self, state: EndpointState) -> EngineSpec:
        """The map ``state``'s endpoint is read with; an engine label the table lacks is logged."""
        table = self._spec.engines
        labels = state.endpoint.labels
        engine = table.lookup(labels)
        named = table.label_value(labels)
        if named and named != engine.name:
            _log.warning(
                "Unknown engine type; scraping as %s",
                engine.name,
                extra={"endpoint": state.endpoint.key, "label": table.label_key, "engine": named},
            )
        return engine

    def _target(self, state: EndpointState) -> _Target:
        ep = state.endpoint
        transport = self._spec.transport
        port = transport.port or ep.metrics_port
        conn = MetricsConnection(ep.address, port, transport.path, tls=self._spec.tls, max_body=self._max_body)
        return _Target(state, self._engine(state), conn, PageMemo())

    async def _poll(self, target: _Target) -> None:
        duration = self._metrics.duration
        clock = self._clock
        key = target.state.endpoint.key
        phase = self._phase(key, self._interval)
        try:
            while True:
                due = clock.now()
                started = time.perf_counter()
                try:
                    await self._scrape(target)
                except _ScrapeError as e:
                    self._errors[e.reason].inc()
                    target.failures += 1
                    self._note_problem(target, f"{e.reason}: {e}")
                    self._tell_health(target, e)
                except Exception:  # task boundary: an unforeseen error costs one poll, never the loop
                    _log.exception("Scrape failed unexpectedly", extra={"endpoint": key})
                    self._errors["http"].inc()
                    target.failures += 1
                else:
                    duration.labels(engine=target.engine.name).observe(time.perf_counter() - started)
                    if target.failures:
                        _log.info("Scrape recovered", extra={"endpoint": key, "failures": target.failures})
                    target.failures = 0
                delay = self._interval
                if target.failures:  # a configured interval above max_backoff is never shortened
                    delay = min(max(self._max_backoff, delay), delay * 2.0**target.failures)
                delay, phase = delay + phase, 0.0  # the first wait puts the endpoint on its phase
                # Start to start, but never less than half the interval: a loop too busy to keep up
                # sheds scrapes instead of queueing them back to back in front of requests.
                await clock.sleep(max(delay / 2, due + delay - clock.now()))
        finally:
            target.conn.close()

    def _tell_health(self, target: _Target, error: _ScrapeError) -> None:
        """Refused or reset: unreachable; a timeout or a bad answer: suspect; unusable metrics: neither."""
        health = target.state.health
        if error.unreachable:
            health.unreachable(f"scrape {error.reason}: {error}", self._clock.now())
        elif error.reason != "parse":
            health.scrape_failed(f"scrape {error.reason}: {error}")

    def _note_problem(self, target: _Target, problem: str) -> None:
        if problem != target.problem:
            target.problem = problem
            _log.warning("Scrape problem", extra={"endpoint": target.state.endpoint.key, "problem": problem})

    async def _scrape(self, target: _Target) -> None:
        """One poll; raises :class:`_ScrapeError` unless a new snapshot was stored."""
        body = await self._fetch(target.conn)
        state = target.state
        try:
            extraction = read(
                body, target.engine, previous=state.metrics, updated_at=self._clock.now(), memo=target.memo
            )
        except Exception as e:  # parser bugs must cost one poll, not the task
            _log.exception("Metrics parse failed", extra={"endpoint": state.endpoint.key})
            raise _ScrapeError("parse", f"{type(e).__name__}: {e}") from e
        if extraction.updated:
            snapshot = state.metrics = extraction.snapshot
            state.health.scrape_ok(snapshot.updated_at)
            if snapshot.scrape_interval:
                self._metrics.interval.labels(engine=target.engine.name).observe(snapshot.scrape_interval)
        if extraction.errors:
            problem = "; ".join(extraction.errors)
            if not extraction.updated:
                raise _ScrapeError("parse", problem)
            self._errors["parse"].inc()
            self._note_problem(target, f"parse: {problem}")
        elif target.problem:
            target.problem = ""

    async def _fetch(self, conn: MetricsConnection) -> bytes:
        try:
            async with asyncio.timeout(self._timeout):
                return await conn.get()
        except TimeoutError as e:
            raise _ScrapeError("timeout", f"no answer from {conn.where} within {self._timeout}s") from e
        except FetchError as e:
            raise _ScrapeError(e.reason, str(e), unreachable=e.unreachable) from e
