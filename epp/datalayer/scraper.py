"""One poll task per endpoint: fetch ``/metrics``, parse, swap in a new :class:`MetricsSnapshot`.

Scrapers follow the datastore: a task starts when an endpoint is added and is cancelled when it
is removed (or replaced), so removing an endpoint frees everything it held. Each poll has its own
deadline and each endpoint its own task, so a dead or hanging server only delays itself; failures
keep the last metrics (their age grows, which staleness checks see), are counted in
``epp_scrape_errors_total{reason}`` and back off exponentially up to ``max_backoff``.

Where and how to scrape is GIE's flags (``ModelServerMetricsOptions``): scheme (one TLS context
for all endpoints), path, certificate check, and metric names that override each engine's map.
The endpoint's metrics port (``--model-server-metrics-port``) is the datastore's business.

The request path never waits on a scrape: a poll ends with one reference assignment,
``state.metrics = snapshot``, which a scheduling cycle reads whole or not at all. Intervals are
waited on the injected clock, so tests drive the loop with ``ManualClock``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from epp.clock import Clock
from epp.config.options import ModelServerMetricsOptions
from epp.datalayer.engines import DEFAULT_ENGINE, EngineSpec, engine_spec, read, with_overrides
from epp.datalayer.metrics_fetch import FetchError, MetricsConnection, tls_context
from epp.datastore.types import EndpointListener
from epp.framework.endpoint import ENGINE_TYPE_LABEL, EndpointState
from epp.telemetry.metrics import EppMetrics

__all__ = ["EndpointSource", "ScraperManager"]

_log = logging.getLogger(__name__)

_REASONS = ("timeout", "http", "connect", "parse")


class EndpointSource(Protocol):
    """What the scrapers need of the datastore."""

    def endpoints(self) -> Sequence[EndpointState]: ...

    def subscribe(self, listener: EndpointListener) -> Callable[[], None]: ...


class _ScrapeError(Exception):
    """A failed poll: ``reason`` is the ``epp_scrape_errors_total`` label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(slots=True)
class _Target:
    """Per-endpoint poll state, owned by its task."""

    state: EndpointState
    engine: EngineSpec
    conn: MetricsConnection
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
        source: ModelServerMetricsOptions | None = None,
        max_body_bytes: int = 16 * 1024 * 1024,
    ) -> None:
        """``source``: scheme, path, certificate check and metric names (GIE's flags); default plain vLLM."""
        if interval <= 0 or timeout <= 0 or max_backoff < interval:
            raise ValueError(
                f"scrape interval ({interval}) and timeout ({timeout}) must be > 0 "
                f"and max_backoff ({max_backoff}) >= interval"
            )
        source = source or ModelServerMetricsOptions()
        self._datastore = datastore
        self._clock = clock
        self._metrics = metrics
        self._interval = interval
        self._timeout = timeout
        self._max_backoff = max_backoff
        self._source = source
        self._tls = tls_context(verify=not source.https_insecure_skip_verify) if source.scheme == "https" else None
        # Engine label → its spec with the flags' overrides; built for the default engine now, so a
        # metric spec that does not parse (SelectorError) fails here, at start, not in a scrape.
        self._engines = {DEFAULT_ENGINE: with_overrides(engine_spec(DEFAULT_ENGINE), source)}
        self._max_body = max_body_bytes
        self._errors = {reason: metrics.scrape_errors.labels(reason=reason) for reason in _REASONS}
        self._tasks: dict[str, tuple[EndpointState, asyncio.Task[None]]] = {}
        self._retiring: set[asyncio.Task[None]] = set()
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

    async def stop(self) -> None:
        """Stop following the datastore; cancel every scrape task and wait for them to end."""
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for _, task in self._tasks.values():
            self._retire(task)
        self._tasks.clear()
        if self._retiring:
            await asyncio.gather(*self._retiring, return_exceptions=True)

    def _on_change(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        # Removals first: a replaced endpoint arrives in both lists under the same key.
        for state in removed:
            entry = self._tasks.get(state.endpoint.key)
            if entry is not None and entry[0] is state:
                del self._tasks[state.endpoint.key]
                self._retire(entry[1])
        for state in added:
            key = state.endpoint.key
            previous = self._tasks.pop(key, None)
            if previous is not None:
                self._retire(previous[1])
            task = asyncio.get_running_loop().create_task(self._poll(self._target(state)), name=f"epp-scrape:{key}")
            task.add_done_callback(self._task_ended)
            self._tasks[key] = (state, task)

    def _target(self, state: EndpointState) -> _Target:
        ep = state.endpoint
        engine = self._engines.get(ep.engine)
        if engine is None:
            engine = self._engines[ep.engine] = with_overrides(engine_spec(ep.engine), self._source)
        if engine.name != ep.engine:
            _log.warning(
                "Unknown engine type; scraping as %s",
                engine.name,
                extra={"endpoint": ep.key, "label": ENGINE_TYPE_LABEL, "engine": ep.engine},
            )
        conn = MetricsConnection(ep.address, ep.metrics_port, self._source.path, tls=self._tls, max_body=self._max_body)
        return _Target(state, engine, conn)

    def _retire(self, task: asyncio.Task[None]) -> None:
        task.cancel()
        self._retiring.add(task)
        task.add_done_callback(self._retiring.discard)

    @staticmethod
    def _task_ended(task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        exc = task.exception()
        # _poll never returns and catches per-poll errors, so reaching here is a bug: say so loudly.
        _log.error("Scrape task ended unexpectedly", extra={"task": task.get_name()}, exc_info=exc)

    async def _poll(self, target: _Target) -> None:
        duration = self._metrics.scrape_duration.labels(engine=target.engine.name)
        key = target.state.endpoint.key
        try:
            while True:
                started = time.perf_counter()
                try:
                    await self._scrape(target)
                except _ScrapeError as e:
                    self._errors[e.reason].inc()
                    target.failures += 1
                    self._note_problem(target, f"{e.reason}: {e}")
                except Exception:  # task boundary: an unforeseen error costs one poll, never the loop
                    _log.exception("Scrape failed unexpectedly", extra={"endpoint": key})
                    self._errors["http"].inc()
                    target.failures += 1
                else:
                    duration.observe(time.perf_counter() - started)
                    if target.failures:
                        _log.info("Scrape recovered", extra={"endpoint": key, "failures": target.failures})
                    target.failures = 0
                delay = self._interval
                if target.failures:
                    delay = min(self._max_backoff, self._interval * 2.0**target.failures)
                await self._clock.sleep(delay)
        finally:
            target.conn.close()

    def _note_problem(self, target: _Target, problem: str) -> None:
        if problem != target.problem:
            target.problem = problem
            _log.warning("Scrape problem", extra={"endpoint": target.state.endpoint.key, "problem": problem})

    async def _scrape(self, target: _Target) -> None:
        """One poll; raises :class:`_ScrapeError` unless a new snapshot was stored."""
        body = await self._fetch(target.conn)
        state = target.state
        try:
            extraction = read(body, target.engine, previous=state.metrics, updated_at=self._clock.now())
        except Exception as e:  # parser bugs must cost one poll, not the task
            _log.exception("Metrics parse failed", extra={"endpoint": state.endpoint.key})
            raise _ScrapeError("parse", f"{type(e).__name__}: {e}") from e
        if extraction.updated:
            state.metrics = extraction.snapshot
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
            raise _ScrapeError(e.reason, str(e)) from e
