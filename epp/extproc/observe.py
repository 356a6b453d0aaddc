"""What an ext_proc stream records in :class:`EppMetrics`, with label children resolved once.

``Metric.labels(...)`` takes a lock and builds a key on every call; a request touches about ten
series, so the children for each (model, target model) pair are looked up once and kept. The
cache is bounded (model names come from clients); when it fills it is simply rebuilt.
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from epp.extproc.usage import Usage
from epp.telemetry.metrics import EppMetrics

__all__ = ["StreamMetrics"]

_MAX_CACHED_PAIRS = 4096


class _Series:
    """The label children of one (model, target model) pair."""

    __slots__ = ("legacy_total", "sizes", "running", "duration", "response_sizes", "input", "output", "cached", "tpot")

    def __init__(self, m: EppMetrics, model: str, target: str) -> None:
        self.legacy_total: Any = m.legacy_request_total.labels(model, target)
        self.sizes: Any = m.request_sizes.labels(model, target)
        self.running: Any = m.running_requests.labels(model)
        self.duration: Any = m.request_duration.labels(model, target)
        self.response_sizes: Any = m.response_sizes.labels(model, target)
        self.input: Any = m.input_tokens.labels(model, target)
        self.output: Any = m.output_tokens.labels(model, target)
        self.cached: Any = m.prompt_cached_tokens.labels(model, target)
        self.tpot: Any = m.normalized_tpot.labels(model, target)


class StreamMetrics:
    """Request, response, error and picker-overhead metrics for every stream of one server."""

    __slots__ = ("_m", "_series", "_parse", "_schedule", "_respond", "_total")

    def __init__(self, metrics: EppMetrics) -> None:
        self._m = metrics
        self._series: dict[tuple[str, str], _Series] = {}
        overhead = metrics.picker_overhead
        self._parse: Any = overhead.labels("parse")
        self._schedule: Any = overhead.labels("schedule")
        self._respond: Any = overhead.labels("respond")
        self._total: Any = overhead.labels("total")

    def _get(self, model: str, target: str) -> _Series:
        key = (model, target)
        series = self._series.get(key)
        if series is None:
            if len(self._series) >= _MAX_CACHED_PAIRS:
                self._series.clear()
            series = self._series[key] = _Series(self._m, model, target)
        return series

    def routed(self, model: str, target: str, priority: int, size: int) -> None:
        """A body request was routed and is being forwarded (it now counts as running)."""
        series = self._get(model, target)
        self._m.request_total.labels(model, target, str(priority)).inc()
        series.legacy_total.inc()
        series.sizes.observe(size)
        series.running.inc()

    def released(self, model: str, target: str) -> None:
        """A running request's stream ended."""
        self._get(model, target).running.dec()

    def error(self, model: str, target: str, code: str) -> None:
        """A stream ended in error: ``code`` is the ErrorCode label (or ModelServerError)."""
        self._m.request_error_total.labels(model, target, code).inc()

    def response_complete(self, model: str, target: str, size: int, duration: float, usage: Usage | None) -> None:
        """The response ended; ``duration`` 0 means unknown (no request phase). Counts ≤ 0 are skipped."""
        series = self._get(model, target)
        series.response_sizes.observe(size)
        if duration:
            series.duration.observe(duration)
        if usage is None:
            return
        if usage.prompt_tokens > 0:
            series.input.observe(usage.prompt_tokens)
        if usage.completion_tokens > 0:
            series.output.observe(usage.completion_tokens)
            if duration:
                series.tpot.observe(duration / usage.completion_tokens)
        if usage.cached_tokens > 0:
            series.cached.observe(usage.cached_tokens)

    def overhead(self, t_last: float, t_parsed: float | None, t_scheduled: float, t_built: float) -> None:
        """The picker's own time for one routed request, ending now (answer handed to gRPC)."""
        if t_parsed is not None:
            self._parse.observe(t_parsed - t_last)
            self._schedule.observe(t_scheduled - t_parsed)
        else:
            self._schedule.observe(t_scheduled - t_last)
        self._respond.observe(t_built - t_scheduled)
        self._total.observe(perf_counter() - t_last)
