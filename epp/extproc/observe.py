"""What an ext_proc stream records in :class:`EppMetrics`, with label children resolved once.

``Metric.labels(...)`` takes a lock and builds a key on every call; a request touches about ten
series, so the children for each request label set are looked up once and kept. The cache is
bounded (model names come from clients); when it fills it is simply rebuilt. Under
``--metrics-naming both`` each child is a tee that writes the GIE series and its ``llm_d_epp_*``
twin, so twins cost their two updates and no extra lookups.

A request's labels are (model, target model, fairness id, priority): the llm-d request series
carry all four, GIE's a subset. The fairness id comes from the client's header, so its distinct
values are capped as upstream caps them (1000, then ``other``).
"""

from __future__ import annotations

from time import perf_counter
from typing import Any

from epp.extproc.usage import Usage
from epp.framework import headers as wire
from epp.framework.request import InferenceRequest
from epp.telemetry.families import CounterChild, GaugeChild, HistogramChild
from epp.telemetry.metrics import EppMetrics

__all__ = ["RequestLabels", "StreamMetrics"]

_MAX_CACHED_LABELS = 4096
_MAX_FAIRNESS_IDS = 1000
_OVERFLOW = "other"

RequestLabels = tuple[str, str, str, str]
"""(model, target model, fairness id, priority) of one request, as its metric labels."""

_NO_REQUEST: RequestLabels = ("", "", wire.DEFAULT_FAIRNESS_ID, "0")


class _Series:
    """The label children of one request label set."""

    __slots__ = (
        "total",
        "legacy_total",
        "sizes",
        "running",
        "duration",
        "response_sizes",
        "input",
        "output",
        "cached",
        "tpot",
    )

    def __init__(self, m: EppMetrics, labels: RequestLabels) -> None:
        self.total: CounterChild = m.request_total.labels(*labels)
        self.legacy_total: CounterChild = m.legacy_request_total.labels(*labels)
        self.sizes: HistogramChild = m.request_sizes.labels(*labels)
        self.running: GaugeChild = m.running_requests.labels(*labels)
        self.duration: HistogramChild = m.request_duration.labels(*labels)
        self.response_sizes: HistogramChild = m.response_sizes.labels(*labels)
        self.input: HistogramChild = m.input_tokens.labels(*labels)
        self.output: HistogramChild = m.output_tokens.labels(*labels)
        self.cached: HistogramChild = m.prompt_cached_tokens.labels(*labels)
        self.tpot: HistogramChild = m.normalized_tpot.labels(*labels)


class StreamMetrics:
    """Request, response, error and picker-overhead metrics for every stream of one server."""

    __slots__ = ("_m", "_series", "_fairness_ids", "_parse", "_schedule", "_respond", "_total")

    def __init__(self, metrics: EppMetrics) -> None:
        self._m = metrics
        self._series: dict[RequestLabels, _Series] = {}
        self._fairness_ids: set[str] = set()
        overhead = metrics.picker_overhead
        self._parse: Any = overhead.labels("parse")
        self._schedule: Any = overhead.labels("schedule")
        self._respond: Any = overhead.labels("respond")
        self._total: Any = overhead.labels("total")

    def labels_of(self, request: InferenceRequest | None) -> RequestLabels:
        """The request's metric labels; the target model defaults to the model, the fairness id to ``default-flow``."""
        if request is None:
            return _NO_REQUEST
        fairness = wire.read(request.headers, wire.FAIRNESS_ID) or wire.DEFAULT_FAIRNESS_ID
        if fairness not in self._fairness_ids:
            if len(self._fairness_ids) >= _MAX_FAIRNESS_IDS:
                fairness = _OVERFLOW
            else:
                self._fairness_ids.add(fairness)
        return request.model, request.target_model or request.model, fairness, str(request.priority)

    def _get(self, labels: RequestLabels) -> _Series:
        series = self._series.get(labels)
        if series is None:
            if len(self._series) >= _MAX_CACHED_LABELS:
                self._series.clear()
            series = self._series[labels] = _Series(self._m, labels)
        return series

    def routed(self, labels: RequestLabels, size: int) -> None:
        """A body request was routed and is being forwarded (it now counts as running)."""
        series = self._get(labels)
        series.total.inc()
        series.legacy_total.inc()
        series.sizes.observe(size)
        series.running.inc()

    def released(self, labels: RequestLabels) -> None:
        """A running request's stream ended (``labels``: those it was counted as running under)."""
        self._get(labels).running.dec()

    def error(self, labels: RequestLabels, code: str) -> None:
        """A stream ended in error: ``code`` is the ErrorCode label (or ModelServerError)."""
        self._m.request_error_total.labels(*labels, code).inc()

    def response_complete(self, labels: RequestLabels, size: int, duration: float, usage: Usage | None) -> None:
        """The response ended; ``duration`` 0 means unknown (no request phase). Counts ≤ 0 are skipped."""
        series = self._get(labels)
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
