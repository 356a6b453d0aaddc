"""The picker's own Prometheus series, with upstream names, labels, HELP prefixes and buckets.

Series live on a registry the caller owns (one per process, or per test), never the global one,
so tests can run side by side and compare exact values.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from epp import __version__

__all__ = ["EppMetrics"]

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
_SCHEDULER_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)
_OVERHEAD_BUCKETS = (
    0.00005, 0.0001, 0.0002, 0.0003, 0.0005, 0.00075, 0.001, 0.0015, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.02,
    0.05, 0.1, 0.25,
)  # fmt: skip
_SCRAPE_BUCKETS = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)

_OBJECTIVE = ("model_name", "target_model_name")


def _alpha(text: str) -> str:
    return f"[ALPHA] {text}"


class EppMetrics:
    """Every series the picker exports; components receive this object, not the registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        r = self.registry
        # Requests (inference_objective_*, plus the legacy inference_model_* request counter).
        self.request_total = Counter(
            "inference_objective_request_total",
            _alpha("Counter of inference objective requests broken out for each model and target model."),
            (*_OBJECTIVE, "priority"),
            registry=r,
        )
        self.legacy_request_total = Counter(
            "inference_model_request_total",
            _alpha("Counter of inference model requests broken out for each model and target model."),
            _OBJECTIVE,
            registry=r,
        )
        self.request_error_total = Counter(
            "inference_objective_request_error_total",
            _alpha("Counter of inference objective requests errors broken out for each model and target model."),
            (*_OBJECTIVE, "error_code"),
            registry=r,
        )
        self.request_duration = Histogram(
            "inference_objective_request_duration_seconds",
            _alpha("Inference objective response latency distribution in seconds for each model and target model."),
            _OBJECTIVE,
            buckets=_DURATION_BUCKETS,
            registry=r,
        )
        self.request_sizes = Histogram(
            "inference_objective_request_sizes",
            _alpha("Inference objective requests size distribution in bytes for each model and target model."),
            _OBJECTIVE,
            buckets=_REQUEST_SIZE_BUCKETS,
            registry=r,
        )
        self.response_sizes = Histogram(
            "inference_objective_response_sizes",
            _alpha("Inference objective responses size distribution in bytes for each model and target model."),
            _OBJECTIVE,
            buckets=_RESPONSE_SIZE_BUCKETS,
            registry=r,
        )
        self.input_tokens = Histogram(
            "inference_objective_input_tokens",
            _alpha("Inference objective input token count distribution for requests in each model."),
            _OBJECTIVE,
            buckets=_INPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.output_tokens = Histogram(
            "inference_objective_output_tokens",
            _alpha("Inference objective output token count distribution for requests in each model."),
            _OBJECTIVE,
            buckets=_OUTPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.prompt_cached_tokens = Histogram(
            "inference_objective_prompt_cached_tokens",
            _alpha("Inference objective prompt cached token count distribution for requests in each model."),
            _OBJECTIVE,
            buckets=_INPUT_TOKEN_BUCKETS,
            registry=r,
        )
        self.running_requests = Gauge(
            "inference_objective_running_requests",
            _alpha("Inference objective number of running requests in each model."),
            ("model_name",),
            registry=r,
        )
        self.normalized_tpot = Histogram(
            "inference_objective_normalized_time_per_output_token_seconds",
            _alpha("Inference objective latency divided by number of output tokens in seconds for each model."),
            _OBJECTIVE,
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        # Pool gauges (label ``name`` = pool name).
        self.pool_avg_kv = Gauge(
            "inference_pool_average_kv_cache_utilization",
            _alpha("The average kv cache utilization for an inference server pool."),
            ("name",),
            registry=r,
        )
        self.pool_avg_queue = Gauge(
            "inference_pool_average_queue_size",
            _alpha("The average number of requests pending in the model server queue."),
            ("name",),
            registry=r,
        )
        self.pool_avg_running = Gauge(
            "inference_pool_average_running_requests",
            _alpha("The average number of running requests across all pods in the inference pool."),
            ("name",),
            registry=r,
        )
        self.pool_ready_pods = Gauge(
            "inference_pool_ready_pods",
            _alpha("The number of ready pods in the inference server pool."),
            ("name",),
            registry=r,
        )
        self.pool_per_pod_queue = Gauge(
            "inference_pool_per_pod_queue_size",
            _alpha("The total number of requests pending in the model server queue for each underlying pod."),
            ("name", "model_server_pod"),
            registry=r,
        )
        # Scheduler and plugins.
        self.scheduler_e2e = Histogram(
            "inference_extension_scheduler_e2e_duration_seconds",
            _alpha("Scheduling latency distribution in seconds."),
            buckets=_SCHEDULER_BUCKETS,
            registry=r,
        )
        self.scheduler_attempts = Counter(
            "inference_extension_scheduler_attempts_total",
            _alpha("Total number of scheduling attempts."),
            ("status", "target_model_name", "pod_name", "namespace", "port"),
            registry=r,
        )
        self.plugin_duration = Histogram(
            "inference_extension_plugin_duration_seconds",
            _alpha("Plugin processing latency distribution in seconds for each extension point, plugin type and name."),
            ("extension_point", "plugin_type", "plugin_name"),
            buckets=_SCHEDULER_BUCKETS,
            registry=r,
        )
        self.prefix_indexer_size = Gauge(
            "inference_extension_prefix_indexer_size",
            _alpha("Size of the prefix indexer."),
            registry=r,
        )
        self.prefix_indexer_hit_ratio = Histogram(
            "inference_extension_prefix_indexer_hit_ratio",
            _alpha("Ratio of prefix length matched to total prefix length in the cache lookup."),
            buckets=(0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
            registry=r,
        )
        self.prefix_indexer_hit_bytes = Histogram(
            "inference_extension_prefix_indexer_hit_bytes",
            _alpha("Length of the prefix match in number of bytes in the cache lookup."),
            buckets=(0, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
            registry=r,
        )
        self.model_rewrite_decisions = Counter(
            "inference_extension_model_rewrite_decisions_total",
            _alpha("Total number of model rewrite decisions."),
            ("model_rewrite_name", "model_name", "target_model"),
            registry=r,
        )
        self.info = Gauge(
            "inference_extension_info",
            _alpha("General information of the current build of Inference Extension."),
            ("commit", "build_ref"),
            registry=r,
        )
        self.info.labels(commit="", build_ref=f"epp-{__version__}").set(1)
        # Ours (upstream has no equivalent).
        self.picker_overhead = Histogram(
            "epp_picker_overhead_seconds",
            "Time the picker adds to a request, per phase: 'parse' (body to InferenceRequest), "
            "'schedule' (director and scheduler), 'respond' (building the routing response), "
            "'total' (last request byte to routing response).",
            ("phase",),
            buckets=_OVERHEAD_BUCKETS,
            registry=r,
        )
        self.scrape_duration = Histogram(
            "epp_scrape_duration_seconds",
            "Time to fetch and parse one model server's /metrics.",
            ("engine",),
            buckets=_SCRAPE_BUCKETS,
            registry=r,
        )
        self.scrape_errors = Counter(
            "epp_scrape_errors_total",
            "Failed /metrics scrapes of model servers, by reason (timeout, http, connect, parse).",
            ("reason",),
            registry=r,
        )
        self.config_reloads = Counter(
            "epp_config_reloads_total",
            "Configuration reloads by result (success, rejected).",
            ("result",),
            registry=r,
        )
        self.config_last_reload_success = Gauge(
            "epp_config_last_reload_successful",
            "1 if the last configuration load succeeded, 0 if the last good configuration is kept.",
            registry=r,
        )
