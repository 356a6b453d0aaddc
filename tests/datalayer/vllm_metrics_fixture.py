"""A realistic vLLM (0.10+, V1 engine) ``/metrics`` page, for parser tests and the benchmark.

The layout follows what a vLLM OpenAI server exposes through prometheus_client: the process and
GC collectors, prometheus-fastapi-instrumentator's ``http_*`` series, then every ``vllm:`` family
(gauges, counters with ``_total``/``_created``, histograms with ``_bucket``/``_count``/``_sum``/
``_created``), labelled by ``engine`` and ``model_name``. Several model names are emitted to
reach the 30–80 KB of a busy server. Histogram contents come from a seeded RNG: deterministic.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

__all__ = ["LoraSeries", "VllmPage", "render_vllm_metrics"]

_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
         80.0, 160.0, 640.0, 2560.0)  # fmt: skip
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
_LATENCY = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
            960.0, 1920.0, 7680.0)  # fmt: skip
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000, 131072)
_ITERATION = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
_PARAMS_N = (1, 2, 5, 10, 20)
_HTTP_HIGHR = (0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 7.5,
               10.0, 30.0, 60.0)  # fmt: skip


@dataclass(frozen=True)
class LoraSeries:
    """One ``vllm:lora_requests_info`` series; ``value`` is the time the set was last seen."""

    running: str
    waiting: str
    value: float


@dataclass
class VllmPage:
    """The state the page reports; defaults are a busy 8B model with two LoRA adapters."""

    waiting: float = 3
    running: float = 12
    kv_usage: float = 0.4375
    model_names: Sequence[str] = ("meta-llama/Llama-3.1-8B-Instruct", "sql-lora")
    lora: Sequence[LoraSeries] = field(
        default_factory=lambda: (
            LoraSeries("", "", 1_750_000_000.5),
            LoraSeries("sql-lora", "", 1_750_000_100.25),
            LoraSeries("sql-lora,tweet-summary-lora", "tweet-summary-lora", 1_750_000_200.75),
        )
    )
    max_lora: int = 4
    block_size: int = 16
    num_gpu_blocks: str = "27713"
    legacy_kv: bool = False  # pre-0.10 name vllm:gpu_cache_usage_perc instead of kv_cache_usage_perc
    seed: int = 7


def _fmt(v: float) -> str:
    return repr(float(v))


def _labels(pairs: dict[str, str]) -> str:
    if not pairs:
        return ""
    body = ",".join(f'{k}="{v}"' for k, v in pairs.items())
    return "{" + body + "}"


class _Writer:
    def __init__(self, seed: int) -> None:
        self.lines: list[str] = []
        self.rng = random.Random(seed)
        self.created = 1_750_000_000.123456

    def family(self, name: str, kind: str, help_text: str) -> None:
        self.lines.append(f"# HELP {name} {help_text}")
        self.lines.append(f"# TYPE {name} {kind}")

    def sample(self, name: str, labels: dict[str, str], value: float) -> None:
        self.lines.append(f"{name}{_labels(labels)} {_fmt(value)}")

    def gauge(self, name: str, help_text: str, series: Sequence[tuple[dict[str, str], float]]) -> None:
        self.family(name, "gauge", help_text)
        for labels, value in series:
            self.sample(name, labels, value)

    def counter(self, name: str, help_text: str, series: Sequence[dict[str, str]]) -> None:
        self.family(name, "counter", help_text)
        for labels in series:
            self.sample(f"{name}_total", labels, self.rng.randint(0, 10**6))
        for labels in series:
            self.sample(f"{name}_created", labels, self.created)

    def histogram(self, name: str, help_text: str, buckets: Sequence[float], series: Sequence[dict[str, str]]) -> None:
        self.family(name, "histogram", help_text)
        for labels in series:
            count = 0
            for le in buckets:
                count += self.rng.randint(0, 500)
                self.sample(f"{name}_bucket", {**labels, "le": _fmt(le)}, count)
            self.sample(f"{name}_bucket", {**labels, "le": "+Inf"}, count)
            self.sample(f"{name}_count", labels, count)
            self.sample(f"{name}_sum", labels, count * self.rng.random() * buckets[len(buckets) // 2])
        for labels in series:
            self.sample(f"{name}_created", labels, self.created)

    def summary(self, name: str, help_text: str, series: Sequence[dict[str, str]]) -> None:
        self.family(name, "summary", help_text)
        for labels in series:
            count = self.rng.randint(1, 10**5)
            self.sample(f"{name}_count", labels, count)
            self.sample(f"{name}_sum", labels, count * 321.5)
        for labels in series:
            self.sample(f"{name}_created", labels, self.created)


def _process_and_http(w: _Writer) -> None:
    w.family("python_gc_objects_collected_total", "counter", "Objects collected during gc")
    for gen in "012":
        w.sample("python_gc_objects_collected_total", {"generation": gen}, w.rng.randint(0, 10**6))
    w.family("python_gc_objects_uncollectable_total", "counter", "Uncollectable objects found during GC")
    for gen in "012":
        w.sample("python_gc_objects_uncollectable_total", {"generation": gen}, 0)
    w.family("python_gc_collections_total", "counter", "Number of times this generation was collected")
    for gen in "012":
        w.sample("python_gc_collections_total", {"generation": gen}, w.rng.randint(0, 10**4))
    w.gauge(
        "python_info",
        "Python platform information",
        [({"implementation": "CPython", "major": "3", "minor": "12", "patchlevel": "11", "version": "3.12.11"}, 1)],
    )
    for name, value in (
        ("process_virtual_memory_bytes", 6.4e10),
        ("process_resident_memory_bytes", 3.1e9),
        ("process_start_time_seconds", 1.75e9),
        ("process_open_fds", 97),
        ("process_max_fds", 1048576),
    ):
        w.gauge(name, f"{name} of the process.", [({}, value)])
    w.family("process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.")
    w.sample("process_cpu_seconds_total", {}, 12345.67)
    handlers = ("/v1/chat/completions", "/v1/completions", "/metrics", "/health")
    http = [{"handler": h, "method": m, "status": s} for h in handlers for m in ("GET", "POST") for s in ("2xx", "4xx")]
    w.counter("http_requests", "Total number of requests by method, status and handler.", http)
    w.summary(
        "http_request_size_bytes", "Content length of incoming requests by handler.", [{"handler": h} for h in handlers]
    )
    w.summary(
        "http_response_size_bytes",
        "Content length of outgoing responses by handler.",
        [{"handler": h} for h in handlers],
    )
    w.histogram(
        "http_request_duration_highr_seconds",
        "Latency with many buckets but no API specific labels.",
        _HTTP_HIGHR,
        [{}],
    )
    w.histogram(
        "http_request_duration_seconds",
        "Latency with only few buckets by handler.",
        (0.1, 0.5, 1.0),
        [{"handler": h, "method": m} for h in handlers for m in ("GET", "POST")],
    )


def render_vllm_metrics(page: VllmPage | None = None) -> str:
    """The page as vLLM would serve it, ending with a newline."""
    p = page if page is not None else VllmPage()
    w = _Writer(p.seed)
    _process_and_http(w)
    per_model = [{"engine": "0", "model_name": m} for m in p.model_names]
    w.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", [(per_model[0], p.running)])
    w.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", [(per_model[0], p.waiting)])
    kv_name = "vllm:gpu_cache_usage_perc" if p.legacy_kv else "vllm:kv_cache_usage_perc"
    w.gauge(kv_name, "KV-cache usage. 1 means 100 percent usage.", [(per_model[0], p.kv_usage)])
    w.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.", per_model)
    w.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", per_model)
    w.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.", per_model)
    w.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", per_model)
    w.counter("vllm:generation_tokens", "Number of generation tokens processed.", per_model)
    reasons = [{**m, "finished_reason": r} for m in per_model for r in ("stop", "length", "abort")]
    w.counter("vllm:request_success", "Count of successfully processed requests.", reasons)
    w.histogram("vllm:request_prompt_tokens", "Number of prefill tokens processed.", _TOKENS, per_model)
    w.histogram("vllm:request_generation_tokens", "Number of generation tokens processed.", _TOKENS, per_model)
    w.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", _ITERATION, per_model)
    w.histogram(
        "vllm:request_max_num_generation_tokens", "Max generation tokens in a sequence group.", _TOKENS, per_model
    )
    w.histogram("vllm:request_params_n", "Histogram of the n request parameter.", _PARAMS_N, per_model)
    w.histogram("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", _TOKENS, per_model)
    w.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", _TTFT, per_model)
    w.histogram(
        "vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", _TPOT, per_model
    )
    w.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", _TPOT, per_model)
    for name in ("e2e_request_latency", "request_queue_time", "request_inference_time", "request_prefill_time",
                 "request_decode_time"):  # fmt: skip
        w.histogram(f"vllm:{name}_seconds", f"Histogram of {name.replace('_', ' ')} in seconds.", _LATENCY, per_model)
    if p.lora:
        w.gauge(
            "vllm:lora_requests_info",
            "Running stats on lora requests.",
            [
                (
                    {
                        "max_lora": str(p.max_lora),
                        "running_lora_adapters": s.running,
                        "waiting_lora_adapters": s.waiting,
                    },
                    s.value,
                )
                for s in p.lora
            ],
        )
    cache_info = {
        "block_size": str(p.block_size),
        "cache_dtype": "auto",
        "calculate_kv_scales": "False",
        "cpu_offload_gb": "0",
        "enable_prefix_caching": "True",
        "gpu_memory_utilization": "0.9",
        "is_attention_free": "False",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": p.num_gpu_blocks,
        "num_gpu_blocks_override": "None",
        "prefix_caching_hash_algo": "builtin",
        "sliding_window": "None",
        "swap_space": "4",
        "swap_space_bytes": "4294967296",
    }
    w.gauge("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", [(cache_info, 1)])
    return "\n".join(w.lines) + "\n"
