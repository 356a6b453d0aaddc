"""``/metrics`` exactly as a single-process vLLM 0.10 (V1 engine) API server writes it.

Same families, HELP text, types, label names (sorted, as ``prometheus_client`` prints them),
real bucket boundaries, ``_created`` gauges after every counter and histogram, and the same
family order: ``python_*`` and ``process_*`` first, then vLLM's in registration order (queue
gauges, cache counters, token counters, a long run of histograms, ``lora_requests_info``,
``cache_config_info``), then the HTTP instrumentator's. A scrape therefore parses as much text
as against a real server, and the few series the picker needs are not conveniently first.

Rendering is cheap enough for a 50 ms scrape: label strings are built once, and each histogram
re-renders only after it was observed.
"""

from __future__ import annotations

import bisect
import gc
import math
import platform
import resource
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["CONTENT_TYPE", "GaugeValues", "HttpMetrics", "VllmMetrics", "build_1_2_5_buckets"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

FINISH_REASONS = ("stop", "length", "abort")

TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
TPOT_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_LATENCY_BUCKETS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
    40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
PARAMS_N_BUCKETS = (1, 2, 5, 10, 20)
HTTP_HIGHR_BUCKETS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5,
    3.0, 3.5, 4.0, 4.5, 5.0, 7.5, 10.0, 30.0, 60.0,
)  # fmt: skip
HTTP_LOWR_BUCKETS = (0.1, 0.5, 1.0)


def build_1_2_5_buckets(max_value: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, … up to ``max_value`` (vLLM's token-count buckets)."""
    out: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_value:
                return tuple(out)
            out.append(m * scale)
        scale *= 10


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _labels(pairs: Mapping[str, str]) -> str:
    """``{a="x",b="y"}`` with names sorted, or ``""`` for no labels."""
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs.items())) + "}"


def _num(value: float) -> str:
    """A sample value as Go (and ``prometheus_client``) prints it: ``1.0``, ``+Inf``, ``1.7e+09``."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


@dataclass(frozen=True, slots=True)
class GaugeValues:
    """The instantaneous values the engine reports (after pins)."""

    running: int
    waiting: int
    kv_cache_usage: float


class _Counter:
    """A counter family: ``name_total`` series, then the ``name_created`` gauge family."""

    __slots__ = ("_created", "_created_header", "_header", "_name", "_values")

    def __init__(self, name: str, help_text: str) -> None:
        self._header = f"# HELP {name}_total {help_text}\n# TYPE {name}_total counter\n"
        self._created_header = f"# HELP {name}_created {help_text}\n# TYPE {name}_created gauge\n"
        self._values: dict[str, float] = {}
        self._created: dict[str, str] = {}
        self._name = name

    def series(self, labels: Mapping[str, str], created: float) -> str:
        key = _labels(labels)
        if key not in self._values:
            self._values[key] = 0.0
            self._created[key] = _num(created)
        return key

    def inc(self, key: str, amount: float = 1.0) -> None:
        self._values[key] += amount

    def value(self, key: str) -> float:
        return self._values[key]

    def render(self, out: list[str]) -> None:
        out.append(self._header)
        name = self._name
        out.extend(f"{name}_total{key} {_num(v)}\n" for key, v in self._values.items())
        out.append(self._created_header)
        out.extend(f"{name}_created{key} {c}\n" for key, c in self._created.items())


class _HistogramSeries:
    __slots__ = ("bounds", "counts", "count", "sum", "created", "bucket_keys", "key", "cache")

    def __init__(self, name: str, bounds: Sequence[float], labels: Mapping[str, str], created: float) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self.created = _num(created)
        self.key = _labels(labels)
        les = [*(_num(b) for b in bounds), "+Inf"]
        self.bucket_keys = [f"{name}_bucket{_labels({**labels, 'le': le})} " for le in les]
        self.cache: str | None = None

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        self.cache = None

    def observe_also(self, twin: _HistogramSeries, value: float) -> None:
        """Observe ``value`` here and in ``twin`` (same bounds), finding the bucket once."""
        i = bisect.bisect_left(self.bounds, value)
        for s in (self, twin):
            s.counts[i] += 1
            s.count += 1
            s.sum += value
            s.cache = None


class _Histogram:
    """A histogram family; each series caches its text until the next observation."""

    def __init__(self, name: str, help_text: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.bounds = tuple(float(b) for b in bounds)
        self._header = f"# HELP {name} {help_text}\n# TYPE {name} histogram\n"
        self._created_header = f"# HELP {name}_created {help_text}\n# TYPE {name}_created gauge\n"
        self._series: dict[str, _HistogramSeries] = {}

    def series(self, labels: Mapping[str, str], created: float) -> _HistogramSeries:
        key = _labels(labels)
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = _HistogramSeries(self.name, self.bounds, labels, created)
        return found

    def render(self, out: list[str]) -> None:
        out.append(self._header)
        name = self.name
        for s in self._series.values():
            if s.cache is None:
                lines = []
                cumulative = 0
                for key, n in zip(s.bucket_keys, s.counts, strict=True):
                    cumulative += n
                    lines.append(f"{key}{cumulative}.0\n")
                lines.append(f"{name}_count{s.key} {s.count}.0\n{name}_sum{s.key} {_num(s.sum)}\n")
                s.cache = "".join(lines)
            out.append(s.cache)
        out.append(self._created_header)
        out.extend(f"{name}_created{s.key} {s.created}\n" for s in self._series.values())


class _Summary:
    """A summary family without quantiles (count and sum), as the HTTP instrumentator writes."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self._header = f"# HELP {name} {help_text}\n# TYPE {name} summary\n"
        self._created_header = f"# HELP {name}_created {help_text}\n# TYPE {name}_created gauge\n"
        self._series: dict[str, list[float]] = {}  # key → [count, sum, created]

    def observe(self, labels: Mapping[str, str], value: float, now_wall: float) -> None:
        key = _labels(labels)
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = [0.0, 0.0, now_wall]
        s[0] += 1
        s[1] += value

    def render(self, out: list[str]) -> None:
        out.append(self._header)
        name = self.name
        for key, (count, total, _) in self._series.items():
            out.append(f"{name}_count{key} {_num(count)}\n{name}_sum{key} {_num(total)}\n")
        out.append(self._created_header)
        out.extend(f"{name}_created{key} {_num(s[2])}\n" for key, s in self._series.items())


def _gauge(out: list[str], name: str, help_text: str, key: str, value: float) -> None:
    out.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name}{key} {_num(value)}\n")


class _ProcessMetrics:
    """The default registry's ``python_*`` and ``process_*`` families, from this process."""

    def __init__(self, start_wall: float) -> None:
        major, minor, patch = platform.python_version_tuple()
        info = _labels(
            {
                "implementation": platform.python_implementation(),
                "major": major,
                "minor": minor,
                "patchlevel": patch,
                "version": platform.python_version(),
            }
        )
        self._info = (
            f"# HELP python_info Python platform information\n# TYPE python_info gauge\npython_info{info} 1.0\n"
        )
        self._start = _num(start_wall)
        self._max_fds = _num(resource.getrlimit(resource.RLIMIT_NOFILE)[0])

    def render(self, out: list[str]) -> None:
        stats = gc.get_stats()
        for fam, key, help_text in (
            ("collected", "collected", "Objects collected during gc"),
            ("uncollectable", "uncollectable", "Uncollectable objects found during GC"),
            ("collections", "collections", "Number of times this generation was collected"),
        ):
            name = f"python_gc_objects_{fam}_total" if fam != "collections" else "python_gc_collections_total"
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} counter\n")
            out.extend(f'{name}{{generation="{g}"}} {_num(s[key])}\n' for g, s in enumerate(stats))
        out.append(self._info)
        usage = resource.getrusage(resource.RUSAGE_SELF)
        rss = usage.ru_maxrss * 1024
        for name, help_text, value in (
            ("process_virtual_memory_bytes", "Virtual memory size in bytes.", rss * 4),
            ("process_resident_memory_bytes", "Resident memory size in bytes.", rss),
        ):
            out.append(f"# HELP {name} {help_text}\n# TYPE {name} gauge\n{name} {_num(value)}\n")
        out.append(
            "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
            f"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds {self._start}\n"
            "# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
            "# TYPE process_cpu_seconds_total counter\n"
            f"process_cpu_seconds_total {_num(usage.ru_utime + usage.ru_stime)}\n"
            "# HELP process_open_fds Number of open file descriptors.\n"
            f"# TYPE process_open_fds gauge\nprocess_open_fds {_num(64)}\n"
            "# HELP process_max_fds Maximum number of open file descriptors.\n"
            f"# TYPE process_max_fds gauge\nprocess_max_fds {self._max_fds}\n"
        )


class HttpMetrics:
    """``prometheus_fastapi_instrumentator``'s default families, which vLLM's API server exposes."""

    def __init__(self) -> None:
        self._requests = _Counter("http_requests", "Total number of requests by method, status and handler.")
        self._req_size = _Summary("http_request_size_bytes", "Content length of incoming requests by handler.")
        self._resp_size = _Summary("http_response_size_bytes", "Content length of outgoing responses by handler.")
        self._highr = _Histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
            HTTP_HIGHR_BUCKETS,
        )
        self._lowr = _Histogram(
            "http_request_duration_seconds",
            "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ",
            HTTP_LOWR_BUCKETS,
        )

    def observe(
        self, *, handler: str, method: str, status: int, duration: float, req_size: int, resp_size: int, now_wall: float
    ) -> None:
        """Record one finished HTTP request (status grouped as ``2xx``, like the instrumentator)."""
        key = self._requests.series({"handler": handler, "method": method, "status": f"{status // 100}xx"}, now_wall)
        self._requests.inc(key)
        self._req_size.observe({"handler": handler}, req_size, now_wall)
        self._resp_size.observe({"handler": handler}, resp_size, now_wall)
        self._highr.series({}, now_wall).observe(duration)
        self._lowr.series({"handler": handler, "method": method}, now_wall).observe(duration)

    def render(self, out: list[str]) -> None:
        self._requests.render(out)
        self._req_size.render(out)
        self._resp_size.render(out)
        self._highr.render(out)
        self._lowr.render(out)


class VllmMetrics:
    """vLLM's counters and histograms for one served model, and the ``/metrics`` text.

    The engine records into the public attributes; :meth:`render` adds the instantaneous
    gauges it is given.
    """

    def __init__(
        self,
        *,
        model: str,
        max_model_len: int,
        cache_config: Mapping[str, str],
        lora_enabled: bool,
        start_wall: float,
        max_lora_series: int = 64,
    ) -> None:
        labels = {"engine": "0", "model_name": model}
        self._key = _labels(labels)
        w = start_wall
        self._process = _ProcessMetrics(start_wall)
        self.http = HttpMetrics()

        self._gpu_prefix_queries = _Counter(
            "vllm:gpu_prefix_cache_queries",
            "GPU prefix cache queries, in terms of number of queried tokens. "
            "DEPRECATED: Use vllm:prefix_cache_queries instead.",
        )
        self._gpu_prefix_hits = _Counter(
            "vllm:gpu_prefix_cache_hits",
            "GPU prefix cache hits, in terms of number of cached tokens. "
            "DEPRECATED: Use vllm:prefix_cache_hits instead.",
        )
        self._prefix_queries = _Counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self._prefix_hits = _Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens."
        )
        self._preemptions = _Counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self._prompt_tokens = _Counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self._generation_tokens = _Counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._success = _Counter("vllm:request_success", "Count of successfully processed requests.")
        for c in (
            self._gpu_prefix_queries,
            self._gpu_prefix_hits,
            self._prefix_queries,
            self._prefix_hits,
            self._preemptions,
            self._prompt_tokens,
            self._generation_tokens,
        ):
            c.series(labels, w)
        self._success_keys = {r: self._success.series({**labels, "finished_reason": r}, w) for r in FINISH_REASONS}

        tokens = build_1_2_5_buckets(max_model_len)

        fams: list[_Histogram] = []

        def h(name: str, help_text: str, bounds: Sequence[float]) -> _HistogramSeries:
            family = _Histogram(name, help_text, bounds)
            fams.append(family)
            return family.series(labels, w)

        self.request_prompt_tokens = h("vllm:request_prompt_tokens", "Number of prefill tokens processed.", tokens)
        self.request_generation_tokens = h(
            "vllm:request_generation_tokens", "Number of generation tokens processed.", tokens
        )
        self.iteration_tokens = h(
            "vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", ITERATION_TOKEN_BUCKETS
        )
        self.request_max_num_generation_tokens = h(
            "vllm:request_max_num_generation_tokens",
            "Histogram of maximum number of requested generation tokens.",
            tokens,
        )
        self.request_params_n = h("vllm:request_params_n", "Histogram of the n request parameter.", PARAMS_N_BUCKETS)
        self.request_params_max_tokens = h(
            "vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", tokens
        )
        self.time_to_first_token = h(
            "vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", TTFT_BUCKETS
        )
        self.time_per_output_token = h(
            "vllm:time_per_output_token_seconds",
            "Histogram of time per output token in seconds.DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
            TPOT_BUCKETS,
        )
        self.inter_token_latency = h(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", TPOT_BUCKETS
        )
        self.e2e_request_latency = h(
            "vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", REQUEST_LATENCY_BUCKETS
        )
        self.request_queue_time = h(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.request_inference_time = h(
            "vllm:request_inference_time_seconds",
            "Histogram of time spent in RUNNING phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.request_prefill_time = h(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self.request_decode_time = h(
            "vllm:request_decode_time_seconds",
            "Histogram of time spent in DECODE phase for request.",
            REQUEST_LATENCY_BUCKETS,
        )
        self._histograms = fams

        self._lora_enabled = lora_enabled
        self._lora_series: dict[tuple[str, str, str], float] = {}
        self._max_lora_series = max_lora_series
        cache_labels = _labels({**cache_config, "engine": "0"})
        self._cache_config = (
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
            f"# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{cache_labels} 1.0\n"
        )

    # -- recording (called by the engine) ----------------------------------------------------

    def add_prefix_query(self, queried: int, hit: int) -> None:
        for c in (self._gpu_prefix_queries, self._prefix_queries):
            c.inc(self._key, queried)
        for c in (self._gpu_prefix_hits, self._prefix_hits):
            c.inc(self._key, hit)

    def add_preemption(self) -> None:
        self._preemptions.inc(self._key)

    def add_tokens(self, *, prompt: int, generation: int) -> None:
        if prompt:
            self._prompt_tokens.inc(self._key, prompt)
        if generation:
            self._generation_tokens.inc(self._key, generation)

    def add_success(self, finish_reason: str) -> None:
        self._success.inc(self._success_keys[finish_reason])

    def set_lora_info(self, running: Iterable[str], waiting: Iterable[str], max_lora: int, now_wall: float) -> None:
        """Stamp the current adapter sets with ``now_wall``.

        Like vLLM's labelled gauge, every combination ever seen stays exposed with the time it
        was last current; readers take the series with the largest value. The oldest are
        dropped past ``max_lora_series`` so memory stays bounded.
        """
        key = (str(max_lora), ",".join(running), ",".join(waiting))
        self._lora_series.pop(key, None)
        self._lora_series[key] = now_wall
        if len(self._lora_series) > self._max_lora_series:
            del self._lora_series[next(iter(self._lora_series))]

    # -- reading --------------------------------------------------------------------------------

    @property
    def prefix_cache_queries(self) -> int:
        return int(self._prefix_queries.value(self._key))

    @property
    def prefix_cache_hits(self) -> int:
        return int(self._prefix_hits.value(self._key))

    @property
    def preemptions(self) -> int:
        return int(self._preemptions.value(self._key))

    def render(self, gauges: GaugeValues) -> bytes:
        """The whole exposition."""
        out: list[str] = []
        self._process.render(out)
        key = self._key
        _gauge(out, "vllm:num_requests_running", "Number of requests in model execution batches.", key, gauges.running)
        _gauge(out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", key, gauges.waiting)
        _gauge(
            out,
            "vllm:gpu_cache_usage_perc",
            "GPU KV-cache usage. 1 means 100 percent usage.DEPRECATED: Use vllm:kv_cache_usage_perc instead.",
            key,
            gauges.kv_cache_usage,
        )
        self._gpu_prefix_queries.render(out)
        self._gpu_prefix_hits.render(out)
        _gauge(
            out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", key, gauges.kv_cache_usage
        )
        for counter in (
            self._prefix_queries,
            self._prefix_hits,
            self._preemptions,
            self._prompt_tokens,
            self._generation_tokens,
            self._success,
        ):
            counter.render(out)
        for family in self._histograms:
            family.render(out)
        if self._lora_enabled:
            out.append("# HELP vllm:lora_requests_info Running stats on lora requests.\n")
            out.append("# TYPE vllm:lora_requests_info gauge\n")
            for (max_lora, running, waiting), stamp in self._lora_series.items():
                labels = _labels(
                    {"max_lora": max_lora, "running_lora_adapters": running, "waiting_lora_adapters": waiting}
                )
                out.append(f"vllm:lora_requests_info{labels} {_num(stamp)}\n")
        out.append(self._cache_config)
        self.http.render(out)
        return "".join(out).encode()
