"""The scrape worker: ``epp serve``'s scraping in a child process, so many endpoints cost the serving loop little.

Run by :class:`~epp.datalayer.scrape_process.ScrapeProcess` as ``python -m epp.datalayer.scrape_worker``;
it is the same :class:`~epp.datalayer.scraper.ScraperManager` (connections, parser, intervals,
back-off) over endpoints the picker sends on stdin (:mod:`epp.datalayer.scrape_wire`). What it
learns goes back on stdout, gathered for a flush tick (5 ms) after the first news into one :class:`Batch`: each
endpoint's latest snapshot, the health calls the scraper made, in order (consecutive successes
folded into one), and the deltas of its scrape metrics. So the picker's loop handles a couple of
hundred small batches a second however many endpoints there are, instead of every socket event,
page and parse of every endpoint. Time is the system's monotonic clock, which both processes share.

It logs to stderr (inherited: the picker's log stream) with the picker's logging options, and
stops when stdin ends: the picker stopped it, or died (SIGINT, which a terminal sends the whole
process group, is the picker's to handle).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import signal
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from epp.clock import SystemClock
from epp.datalayer.metrics_fetch import TlsFileError, tls_context
from epp.datalayer.scrape_wire import Batch, Setup, read_frame, run_child, write_frame
from epp.datalayer.scraper import ScraperManager, ScrapeSeries
from epp.datastore.types import EndpointListener
from epp.framework.datalayer import ScrapeSpec
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.health import EndpointHealth
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.logs import setup_logging
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Histogram

__all__ = ["main"]

_log = logging.getLogger(__name__)

_QUIET_FLUSH = 1.0


class _Outbox:
    """What the next batch carries: endpoints with a new snapshot, and health calls in order."""

    def __init__(self) -> None:
        self.fresh: set[int] = set()
        self.health: list[tuple[int, str, tuple[Any, ...]]] = []
        self.ready = asyncio.Event()  # something to send: the flusher wakes (an idle worker sleeps)

    def record(self, eid: int, method: str, args: tuple[Any, ...]) -> None:
        self.ready.set()
        last = self.health[-1] if self.health else None
        if method == "scrape_ok" and last is not None and last[0] == eid and last[1] == method:
            self.health[-1] = (eid, method, args)  # a run of successes: the latest says it all
        else:
            self.health.append((eid, method, args))


class _RecordingHealth(EndpointHealth):
    """Passes the scraper's health calls to the picker, whose EndpointHealth decides."""

    __slots__ = ("_eid", "_outbox")

    def __init__(self, key: str, eid: int, outbox: _Outbox) -> None:
        super().__init__(key)
        self._eid = eid
        self._outbox = outbox

    def scrape_ok(self, now: float) -> None:
        self._outbox.fresh.add(self._eid)
        self._outbox.record(self._eid, "scrape_ok", (now,))

    def unreachable(self, reason: str, now: float) -> None:
        self._outbox.record(self._eid, "unreachable", (reason, now))

    def scrape_failed(self, reason: str) -> None:
        self._outbox.record(self._eid, "scrape_failed", (reason,))


class _Endpoints:
    """The endpoints the picker sent, as the ScraperManager's endpoint source."""

    def __init__(self, outbox: _Outbox) -> None:
        self._outbox = outbox
        self.states: dict[int, EndpointState] = {}
        self._listeners: list[EndpointListener] = []

    def endpoints(self) -> Sequence[EndpointState]:
        return list(self.states.values())

    def subscribe(self, listener: EndpointListener) -> Callable[[], None]:
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def change(self, added: Iterable[tuple[int, Endpoint]], removed: Iterable[int]) -> None:
        gone = [state for eid in removed if (state := self.states.pop(eid, None)) is not None]
        new = []
        for eid, endpoint in added:
            state = EndpointState(endpoint)
            state.health = _RecordingHealth(endpoint.key, eid, self._outbox)
            self.states[eid] = state
            new.append(state)
        for listener in list(self._listeners):
            listener(new, gone)


class _MetricDeltas:
    """What the worker's scrape metrics gained since the last batch."""

    def __init__(self, metrics: EppMetrics) -> None:
        self._metrics = metrics.series(ScrapeSeries)
        self._sent: dict[tuple[str, tuple[str, ...]], tuple[list[int], float]] = {}

    def _histogram(self, name: str, histogram: Histogram) -> dict[str, tuple[list[int], float]]:
        out = {}
        for labels, value in histogram.items():
            before_counts, before_sum = self._sent.get((name, labels), ([0] * len(value.counts), 0.0))
            if value.sum != before_sum or value.counts != before_counts:
                out[labels[0]] = (
                    [n - b for n, b in zip(value.counts, before_counts, strict=True)],
                    value.sum - before_sum,
                )
                self._sent[(name, labels)] = (list(value.counts), value.sum)
        return out

    def _counter(self, name: str, counter: Counter) -> dict[str, float]:
        out = {}
        for labels, value in counter.items():
            before = self._sent.get((name, labels), ([], 0.0))[1]
            if value.value != before:
                out[labels[0]] = value.value - before
                self._sent[(name, labels)] = ([], value.value)
        return out

    def fill(self, batch: Batch) -> None:
        m = self._metrics
        batch.durations = self._histogram("duration", m.duration)
        batch.intervals = self._histogram("interval", m.interval)
        batch.errors = self._counter("errors", m.errors)


def _with_tls(spec: ScrapeSpec) -> ScrapeSpec:
    """The spec the picker sent, with this process's own TLS context (contexts do not cross processes)."""
    t = spec.transport
    if t.scheme != "https":
        return spec
    context = tls_context(
        verify=t.verify, ca_file=t.ca_cert_path, cert_file=t.client_cert_path, key_file=t.client_key_path
    )
    return dataclasses.replace(spec, tls=context)


async def _flush(
    out: asyncio.WriteTransport, outbox: _Outbox, source: _Endpoints, deltas: _MetricDeltas, tick: float
) -> None:
    """Send what the scrapers learnt: ``tick`` after the first news, so a batch gathers a tick's worth.

    Metric changes without news (a page that does not parse: counted, nothing else) go at least
    once a second.
    """
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(_QUIET_FLUSH):
                await outbox.ready.wait()
        await asyncio.sleep(tick)
        outbox.ready.clear()
        batch = Batch()
        deltas.fill(batch)
        if outbox.fresh:
            batch.snapshots = {eid: source.states[eid].metrics for eid in outbox.fresh if eid in source.states}
            outbox.fresh = set()
        if outbox.health:
            batch.health, outbox.health = outbox.health, []
        if batch.snapshots or batch.health or batch.durations or batch.errors or batch.intervals:
            write_frame(out, ("batch", batch))


async def _serve(reader: asyncio.StreamReader, out: asyncio.WriteTransport) -> None:
    first = await read_frame(reader)
    if first is None:
        return
    if first[0] != "setup" or not isinstance(first[1], Setup):
        raise ValueError(f"scrape worker: expected setup first, got {first[0]!r}")
    setup: Setup = first[1]
    setup_logging(setup.logging)
    outbox = _Outbox()
    source = _Endpoints(outbox)
    metrics = EppMetrics()
    scrapers = ScraperManager(
        source,
        SystemClock(),
        metrics,
        interval=setup.interval,
        timeout=setup.timeout,
        max_backoff=setup.max_backoff,
        max_body_bytes=setup.max_body_bytes,
    )
    await scrapers.start()
    flusher = start_guarded(
        _flush(out, outbox, source, _MetricDeltas(metrics), setup.flush_interval),
        "epp-scrape-worker-flush",
        forever=True,
    )
    try:
        while (message := await read_frame(reader)) is not None:
            kind = message[0]
            if kind == "change":
                source.change(message[1], message[2])
            elif kind == "spec":
                try:
                    scrapers.apply(_with_tls(message[1]))
                except TlsFileError:
                    _log.exception("Scrape worker cannot load the TLS files; keeping the previous scrape spec")
            else:
                raise ValueError(f"scrape worker: unknown message {kind!r}")
    finally:
        await cancel_and_wait(flusher)
        await scrapers.stop()


def main() -> int:
    """Entry point of the scrape worker process."""
    # Ctrl-C in a terminal reaches the whole process group; the picker stops the worker (stdin ends).
    return run_child(_serve, ignore=(signal.SIGINT,))


if __name__ == "__main__":
    sys.exit(main())
