"""The catalogue of vLLM 0.32's own metrics (V1 engine): names, HELP text, types, labels, buckets, order.

A single-process vLLM API server registers its families in a fixed order: the MFU estimates,
queue gauges (waiting split by reason), the sleep state, KV-cache use, cache counters (local,
external, multimodal), token counters (prompt tokens by source, cached ones by tier), request
outcomes, admission rejections, a long run of histograms, ``lora_requests_info``,
``cache_config_info``. The deprecated ``gpu_*`` twins of 0.10 are gone, as from vLLM, and
``time_per_output_token_seconds`` is now per request (``request_time_per_output_token_seconds``).
Series for what the simulator has no model of (FLOPs, external and multimodal caches, other cache
tiers, admission queue limits, sleep) are exposed at their idle values, as vLLM exposes them.
:class:`VllmMetrics` declares them in that order with vLLM's HELP text and real bucket
boundaries, takes the engine's observations, and renders the whole page between the process
families and the HTTP ones (``default_families``), so the few series the picker needs are not
conveniently first. How the text is written is ``exposition``'s business.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .default_families import HttpMetrics, ProcessMetrics
from .exposition import (
    CounterFamily,
    HistogramFamily,
    HistogramSeries,
    family_header,
    gauge,
    labels_text,
    value_text,
)

__all__ = ["GaugeValues", "VllmMetrics", "build_1_2_5_buckets", "cache_config_labels"]

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
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
CACHE_TIERS = ("device", "host", "p2p", "disk", "external_unspecified")
ADMISSION_REASONS = ("max_num_queued_reqs", "max_num_queued_tokens")
SLEEP_STATES = (("awake", 1), ("weights_offloaded", 0), ("discard_all", 0))
_WAITING_BY_REASON_HELP = (
    "Number of waiting requests by reason. Reason labels: 'capacity' = waiting for scheduling capacity; "
    "'deferred' = deferred by transient constraints (LoRA budget, KV transfer, blocked status). Sum of all "
    "reasons equals vllm:num_requests_waiting."
)
_SLEEP_HELP = (
    "Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine is awake; "
    "weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep level 2."
)
_MFU = "(for Model Flops Utilization calculations)."
_CACHED_BY_SOURCE_HELP = (
    "Prefix-cache hit tokens by the cache tier that supplied them: device (local HBM), host (offloaded to DRAM), "
    "disk, p2p (transferred from another vLLM instance) or external_unspecified. Counted at admission; sums to "
    "vllm:prefix_cache_hits + vllm:external_prefix_cache_hits."
)


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


@dataclass(frozen=True, slots=True)
class GaugeValues:
    """The instantaneous values the engine reports (after pins)."""

    running: int
    waiting: int
    kv_cache_usage: float
    deferred: int = 0
    """Of ``waiting``, the requests held back by a transient constraint (their adapter not loaded)."""
    extra: Mapping[str, float] = field(default_factory=dict)
    """Pinned gauges vLLM does not have (``Pins.gauges``), rendered last, unlabelled."""


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
        self._key = labels_text(labels)
        w = start_wall
        self._process = ProcessMetrics(start_wall)
        self.http = HttpMetrics()

        def counter(name: str, help_text: str) -> CounterFamily:
            family = CounterFamily(name, help_text)
            family.series(labels, w)
            return family

        self._estimates = [
            counter("vllm:estimated_flops_per_gpu", f"Estimated number of floating point operations per GPU {_MFU}"),
            counter("vllm:estimated_read_bytes_per_gpu", f"Estimated number of bytes read from memory per GPU {_MFU}"),
            counter(
                "vllm:estimated_write_bytes_per_gpu", f"Estimated number of bytes written to memory per GPU {_MFU}"
            ),
        ]
        self._waiting_keys = {r: labels_text({**labels, "reason": r}) for r in ("capacity", "deferred")}
        sleep = family_header("vllm:engine_sleep_state", _SLEEP_HELP, "gauge")
        self._sleep = sleep + "".join(
            f"vllm:engine_sleep_state{labels_text({**labels, 'sleep_state': st})} {value_text(v)}\n"
            for st, v in SLEEP_STATES
        )
        self._prefix_queries = counter(
            "vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens."
        )
        self._prefix_hits = counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.")
        external = "External prefix cache {} from KV connector cross-instance cache sharing, in terms of number of {}."
        multimodal = "Multi-modal cache {}, in terms of number of {}."
        self._idle_caches = [
            counter("vllm:external_prefix_cache_queries", external.format("queries", "queried tokens")),
            counter("vllm:external_prefix_cache_hits", external.format("hits", "cached tokens")),
            counter("vllm:mm_cache_queries", multimodal.format("queries", "queried items")),
            counter("vllm:mm_cache_hits", multimodal.format("hits", "cached items")),
        ]
        self._preemptions = counter("vllm:num_preemptions", "Cumulative number of preemption from the engine.")
        self._prompt_tokens = counter("vllm:prompt_tokens", "Number of prefill tokens processed.")
        self._by_source = CounterFamily("vllm:prompt_tokens_by_source", "Number of prompt tokens by source.")
        self._source_keys = {src: self._by_source.series({**labels, "source": src}, w) for src in PROMPT_SOURCES}
        self._cached = counter("vllm:prompt_tokens_cached", "Number of cached prompt tokens (local + external).")
        self._cached_by_source = CounterFamily("vllm:prompt_tokens_cached_by_source", _CACHED_BY_SOURCE_HELP)
        self._device_key = [self._cached_by_source.series({**labels, "source": t}, w) for t in CACHE_TIERS][0]
        self._generation_tokens = counter("vllm:generation_tokens", "Number of generation tokens processed.")
        self._success = CounterFamily("vllm:request_success", "Count of successfully processed requests.")
        # Disaggregated serving, the simulator's own series (rendered after vLLM's): each role's requests and pulls.
        self._remote_decodes = counter(
            "sim_pd_remote_decode_requests", "Simulator: prefills served for a remote decode (the prefill role)."
        )
        self._remote_prefills = counter(
            "sim_pd_remote_prefill_requests", "Simulator: requests decoded with KV pulled from a prefill pod."
        )
        self._pulled_tokens = counter(
            "sim_pd_kv_pulled_tokens", "Simulator: prompt tokens whose KV was pulled from a prefill pod."
        )
        self._success_keys = {r: self._success.series({**labels, "finished_reason": r}, w) for r in FINISH_REASONS}
        self._admission = CounterFamily(
            "vllm:admission_rejections", "Number of admission attempts rejected by a queue limit, by reason."
        )
        for reason in ADMISSION_REASONS:
            self._admission.series({"model_name": model, "reason": reason}, w)

        tokens = build_1_2_5_buckets(max_model_len)

        fams: list[HistogramFamily] = []

        def h(name: str, help_text: str, bounds: Sequence[float]) -> HistogramSeries:
            family = HistogramFamily(name, help_text, bounds)
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
        self.inter_token_latency = h(
            "vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", TPOT_BUCKETS
        )
        self.request_time_per_output_token = h(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            TPOT_BUCKETS,
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
        self.request_num_preemptions = h(
            "vllm:request_num_preemptions",
            "Histogram of the number of times a request was preempted.",
            PREEMPTION_BUCKETS,
        )
        self.request_prefill_kv_computed_tokens = h(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            tokens,
        )
        self._histograms = fams

        self._lora_enabled = lora_enabled
        self._lora_series: dict[tuple[str, str, str], float] = {}
        self._max_lora_series = max_lora_series
        cache_labels = labels_text({**cache_config, "engine": "0"})
        header = family_header("vllm:cache_config_info", "Information of the LLMEngine CacheConfig", "gauge")
        self._cache_config = f"{header}vllm:cache_config_info{cache_labels} 1.0\n"

    # -- recording (called by the engine) ----------------------------------------------------

    def add_prefix_query(self, queried: int, hit: int) -> None:
        """A request admitted: ``queried`` prompt tokens looked up, ``hit`` of them found on the device."""
        self._prefix_queries.inc(self._key, queried)
        self._prefix_hits.inc(self._key, hit)
        self._cached.inc(self._key, hit)
        self._cached_by_source.inc(self._device_key, hit)
        self._by_source.inc(self._source_keys["local_cache_hit"], hit)
        self._by_source.inc(self._source_keys["local_compute"], queried - hit)

    def add_preemption(self) -> None:
        self._preemptions.inc(self._key)

    def add_tokens(self, *, prompt: int, generation: int) -> None:
        if prompt:
            self._prompt_tokens.inc(self._key, prompt)
        if generation:
            self._generation_tokens.inc(self._key, generation)

    def add_success(self, finish_reason: str) -> None:
        # vLLM finishes a prefill-for-remote-decode as any max_tokens=1 request: ``length``.
        self._success.inc(self._success_keys["length" if finish_reason == "remote_decode" else finish_reason])

    def add_remote_decode(self) -> None:
        self._remote_decodes.inc(self._key)

    def add_kv_pull(self, tokens: int) -> None:
        self._remote_prefills.inc(self._key)
        if tokens:
            self._pulled_tokens.inc(self._key, tokens)

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

    @property
    def remote_decodes(self) -> int:
        return int(self._remote_decodes.value(self._key))

    @property
    def remote_prefills(self) -> int:
        return int(self._remote_prefills.value(self._key))

    @property
    def kv_pulled_tokens(self) -> int:
        return int(self._pulled_tokens.value(self._key))

    def render(self, gauges: GaugeValues) -> bytes:
        """The whole exposition."""
        out: list[str] = []
        self._process.render(out)
        key = self._key
        for estimate in self._estimates:
            estimate.render(out)
        gauge(out, "vllm:num_requests_running", "Number of requests in model execution batches.", key, gauges.running)
        gauge(out, "vllm:num_requests_waiting", "Number of requests waiting to be processed.", key, gauges.waiting)
        out.append(family_header("vllm:num_requests_waiting_by_reason", _WAITING_BY_REASON_HELP, "gauge"))
        deferred = min(gauges.deferred, gauges.waiting)
        for reason, value in (("capacity", gauges.waiting - deferred), ("deferred", deferred)):
            out.append(f"vllm:num_requests_waiting_by_reason{self._waiting_keys[reason]} {value_text(value)}\n")
        out.append(self._sleep)
        gauge(out, "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", key, gauges.kv_cache_usage)
        for counter in (
            self._prefix_queries,
            self._prefix_hits,
            *self._idle_caches,
            self._preemptions,
            self._prompt_tokens,
            self._by_source,
            self._cached,
            self._cached_by_source,
            self._generation_tokens,
            self._success,
            self._admission,
        ):
            counter.render(out)
        for family in self._histograms:
            family.render(out)
        if self._lora_enabled:
            out.append(family_header("vllm:lora_requests_info", "Running stats on lora requests.", "gauge"))
            for (max_lora, running, waiting), stamp in self._lora_series.items():
                labels = labels_text(
                    {"max_lora": max_lora, "running_lora_adapters": running, "waiting_lora_adapters": waiting}
                )
                out.append(f"vllm:lora_requests_info{labels} {value_text(stamp)}\n")
        out.append(self._cache_config)
        self.http.render(out)
        if self.remote_decodes or self.remote_prefills:
            # vLLM without a KV connector has no such families: the page gains them with the first P/D exchange.
            for counter in (self._remote_decodes, self._remote_prefills, self._pulled_tokens):
                counter.render(out)
        for name, pinned in gauges.extra.items():
            gauge(out, name, "A gauge pinned by a test (POST /_sim/pin).", "", pinned)
        return "".join(out).encode()


def cache_config_labels(
    *, block_size: int, num_gpu_blocks: int, max_model_len: int, enable_prefix_caching: bool
) -> dict[str, str]:
    """``vllm:cache_config_info`` labels as vLLM 0.32 prints its CacheConfig (a GPU's values)."""
    tokens = num_gpu_blocks * block_size
    return {
        "_block_size_resolved": "True",
        "block_size": str(block_size),
        "cache_dtype": "auto",
        "cache_hit_alignment_tokens": "None",
        "effective_attention_block_size": str(block_size),
        "enable_mamba_shared_prefix_checkpoint": "False",
        "enable_prefix_caching": str(enable_prefix_caching),
        "gpu_memory_utilization": "0.92",
        "hash_block_size": "None",
        "is_attention_free": "False",
        "kv_cache_dtype_skip_layers": "[]",
        "kv_cache_layout": "None",
        "kv_cache_max_concurrency": str(round(tokens / max_model_len, 2)),
        "kv_cache_memory_bytes": "None",
        "kv_cache_size_tokens": str(tokens),
        "kv_offloading_backend": "native",
        "kv_offloading_size": "None",
        "kv_sharing_fast_prefill": "False",
        "mamba_block_size": "None",
        "mamba_cache_dtype": "auto",
        "mamba_cache_mode": "none",
        "mamba_page_size_padded": "None",
        "mamba_ssm_cache_dtype": "float32",
        "num_cpu_blocks": "None",
        "num_gpu_blocks": str(num_gpu_blocks),
        "num_gpu_blocks_override": "None",
        "prefix_cache_retention_interval": "0",
        "prefix_caching_hash_algo": "sha256",
        "prefix_match_unit": "None",
        "replayssm_buffer_len": "16",
        "skip_page_size_padded": "None",
        "sliding_window": "None",
        "swa_bounded_replay": "True",
        "use_kda_recoverssm": "False",
        "use_replayssm": "False",
        "user_specified_block_size": "False",
    }
