"""What an ext_proc stream records: upstream's request series and our picker-overhead histogram.

:class:`RequestSeries` declares them (upstream's names, labels, HELP and buckets);
:class:`StreamMetrics` writes them for every stream of one server. A request touches about ten
series, so the children of each request label set are resolved once and kept as one bundle in
the label-child cache (:class:`~epp.telemetry.children.ChildCache`). Under ``--metrics-naming
both`` each child is a tee that writes the GIE series and its ``llm_d_epp_*`` twin, so twins cost
their two updates and no extra lookups.

A request's labels are (model, target model, fairness id, priority): the llm-d request series
carry all four, GIE's a subset. The fairness id comes from the client's header, so its distinct
values are capped as upstream caps them (1000, then ``other``).
"""

from __future__ import annotations

from time import perf_counter

from epp.extproc.usage import Usage
from epp.framework import headers as wire
from epp.framework.request import InferenceRequest
from epp.telemetry.children import CappedLabel, ChildCache
from epp.telemetry.families import CounterChild, GaugeChild, HistogramChild, Names
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Histogram, HistogramValue

__all__ = ["RequestLabels", "RequestSeries", "StreamMetrics"]

_MAX_FAIRNESS_IDS = 1000
_OVERFLOW = "other"

RequestLabels = tuple[str, str, str, str]
"""(model, target model, fairness id, priority) of one request, as its metric labels."""

_NO_REQUEST: RequestLabels = ("", "", wire.DEFAULT_FAIRNESS_ID, "0")

_OBJECTIVE = ("model_name", "target_model_name")
_REQUEST = (*_OBJECTIVE, "fairness_id", "priority")
"""The llm-d request labels; values are always given in this order (GIE's series take a subset)."""

_DURATION_BUCKETS = (
    0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60,
    120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700, 3600,
)  # fmt: skip
_REQUEST_SIZE_BUCKETS = tuple(float(2**i) for i in range(6, 31))  # 64 B .. 1 GiB
_RESPONSE_SIZE_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536)
_INPUT_TOKEN_BUCKETS = (
    1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384, 32778, 65536, 131072, 262144, 524288, 1048576,
)  # fmt: skip
_OUTPUT_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
_TPOT_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_OVERHEAD_BUCKETS = (
    0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02,
    0.05, 0.1, 0.25,
)  # fmt: skip


def _request(gie: str, llm_d: str, gie_help: str, llm_d_help: str, *, gie_labels: tuple[str, ...]) -> Names:
    return Names(gie, llm_d, gie_help, llm_d_help, labels=_REQUEST, gie_labels=gie_labels)


class RequestSeries:
    """The request series (values in ``_REQUEST`` order) and the picker-overhead histogram."""

    def __init__(self, metrics: EppMetrics) -> None:
        f = metrics.families
        self.total = f.counter(
            _request(
                "inference_objective_request_total",
                "llm_d_epp_request_total",
                "Counter of inference objective requests broken out for each model and target model.",
                "Total number of processed requests.",
                gie_labels=(*_OBJECTIVE, "priority"),
            )
        )
        self.legacy_total = f.counter(  # v0.3's counter; the llm-d router has no such series
            Names(
                "inference_model_request_total",
                None,
                "Counter of inference model requests broken out for each model and target model.",
                labels=_REQUEST,
                gie_labels=_OBJECTIVE,
            )
        )
        self.errors = f.counter(  # values: _REQUEST, then the error code
            Names(
                "inference_objective_request_error_total",
                "llm_d_epp_request_error_total",
                "Counter of inference objective requests errors broken out for each model and target model.",
                "Total number of request errors.",
                labels=(*_REQUEST, "error_code"),
                gie_labels=(*_OBJECTIVE, "error_code"),
            )
        )
        self.duration = f.histogram(
            _request(
                "inference_objective_request_duration_seconds",
                "llm_d_epp_request_duration_seconds",
                "Inference objective response latency distribution in seconds for each model and target model.",
                "End-to-end request latency distribution in seconds.",
                gie_labels=_OBJECTIVE,
            ),
            _DURATION_BUCKETS,
        )
        self.sizes = f.histogram(
            _request(
                "inference_objective_request_sizes",
                "llm_d_epp_request_size_bytes",
                "Inference objective requests size distribution in bytes for each model and target model.",
                "Incoming request body size distribution in bytes.",
                gie_labels=_OBJECTIVE,
            ),
            _REQUEST_SIZE_BUCKETS,
        )
        self.response_sizes = f.histogram(
            _request(
                "inference_objective_response_sizes",
                "llm_d_epp_response_size_bytes",
                "Inference objective responses size distribution in bytes for each model and target model.",
                "Outgoing response body size distribution in bytes.",
                gie_labels=_OBJECTIVE,
            ),
            _RESPONSE_SIZE_BUCKETS,
        )
        self.input_tokens = f.histogram(
            _request(
                "inference_objective_input_tokens",
                "llm_d_epp_request_input_tokens",
                "Inference objective input token count distribution for requests in each model.",
                "Input token count distribution per request.",
                gie_labels=_OBJECTIVE,
            ),
            _INPUT_TOKEN_BUCKETS,
        )
        self.output_tokens = f.histogram(
            _request(
                "inference_objective_output_tokens",
                "llm_d_epp_request_output_tokens",
                "Inference objective output token count distribution for requests in each model.",
                "Output token count distribution per request.",
                gie_labels=_OBJECTIVE,
            ),
            _OUTPUT_TOKEN_BUCKETS,
        )
        self.cached_tokens = f.histogram(
            _request(
                "inference_objective_prompt_cached_tokens",
                "llm_d_epp_request_cached_tokens",
                "Inference objective prompt cached token count distribution for requests in each model.",
                "Distribution of prompt tokens read from cache per request, as reported by the model server "
                "in the response.",
                gie_labels=_OBJECTIVE,
            ),
            _INPUT_TOKEN_BUCKETS,
        )
        self.running = f.gauge(
            _request(
                "inference_objective_running_requests",
                "llm_d_epp_request_running",
                "Inference objective number of running requests in each model.",
                "Current number of active running requests.",
                gie_labels=("model_name",),
            )
        )
        self.normalized_tpot = f.histogram(
            _request(
                "inference_objective_normalized_time_per_output_token_seconds",
                "llm_d_epp_request_ntpot_seconds",
                "Inference objective latency divided by number of output tokens in seconds for each model.",
                "Normalized time per output token in seconds (end-to-end latency divided by output token count).",
                gie_labels=_OBJECTIVE,
            ),
            _TPOT_BUCKETS,
        )
        self.picker_overhead = Histogram(  # ours: upstream has no equivalent
            "epp_picker_overhead_seconds",
            "Time the picker adds to a request, per phase: 'parse' (body to InferenceRequest), "
            "'schedule' (director and scheduler), 'respond' (building the routing response), "
            "'total' (last request byte to routing response).",
            ("phase",),
            buckets=_OVERHEAD_BUCKETS,
            registry=metrics.registry,
        )


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

    def __init__(self, m: RequestSeries, labels: RequestLabels) -> None:
        self.total: CounterChild = m.total.labels(*labels)
        self.legacy_total: CounterChild = m.legacy_total.labels(*labels)
        self.sizes: HistogramChild = m.sizes.labels(*labels)
        self.running: GaugeChild = m.running.labels(*labels)
        self.duration: HistogramChild = m.duration.labels(*labels)
        self.response_sizes: HistogramChild = m.response_sizes.labels(*labels)
        self.input: HistogramChild = m.input_tokens.labels(*labels)
        self.output: HistogramChild = m.output_tokens.labels(*labels)
        self.cached: HistogramChild = m.cached_tokens.labels(*labels)
        self.tpot: HistogramChild = m.normalized_tpot.labels(*labels)


class StreamMetrics:
    """Request, response, error and picker-overhead metrics for every stream of one server."""

    __slots__ = ("_m", "_series", "_fairness_ids", "_parse", "_schedule", "_respond", "_total")

    def __init__(self, metrics: EppMetrics) -> None:
        m = self._m = metrics.series(RequestSeries)
        self._series: ChildCache[RequestLabels, _Series] = ChildCache(lambda labels: _Series(m, labels))
        self._fairness_ids = CappedLabel(_MAX_FAIRNESS_IDS, _OVERFLOW)
        overhead = m.picker_overhead
        self._parse: HistogramValue = overhead.labels("parse")
        self._schedule: HistogramValue = overhead.labels("schedule")
        self._respond: HistogramValue = overhead.labels("respond")
        self._total: HistogramValue = overhead.labels("total")

    def labels_of(self, request: InferenceRequest | None) -> RequestLabels:
        """The request's metric labels; the target model defaults to the model, the fairness id to ``default-flow``."""
        if request is None:
            return _NO_REQUEST
        fairness = self._fairness_ids.value(request.flow())
        return request.model, request.target_model or request.model, fairness, str(request.priority)

    def routed(self, labels: RequestLabels, size: int) -> None:
        """A body request was routed and is being forwarded (it now counts as running)."""
        series = self._series.get(labels)
        series.total.inc()
        series.legacy_total.inc()
        series.sizes.observe(size)
        series.running.inc()

    def released(self, labels: RequestLabels) -> None:
        """A running request's stream ended (``labels``: those it was counted as running under)."""
        self._series.get(labels).running.dec()

    def error(self, labels: RequestLabels, code: str) -> None:
        """A stream ended in error: ``code`` is the ErrorCode label (or ModelServerError)."""
        self._m.errors.labels(*labels, code).inc()

    def response_complete(self, labels: RequestLabels, size: int, duration: float, usage: Usage | None) -> None:
        """The response ended; ``duration`` 0 means unknown (no request phase). Counts ≤ 0 are skipped."""
        series = self._series.get(labels)
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
