"""The picker's own Prometheus series, with upstream names, labels, HELP prefixes and buckets.

Series live on a registry the caller owns (one per process, or per test), never the global one,
so tests can run side by side and compare exact values.

Upstream's series come under GIE's names (``inference_objective_*``, ``inference_pool_*``,
``inference_extension_*``), the llm-d router's (``llm_d_epp_*``, with ``fairness_id`` and
``priority`` on the request series), or both, as ``--metrics-naming`` says; each is a
:class:`~epp.telemetry.families.Family` written through one call. The default, ``both``, is what
the llm-d router emits and what the upstream dashboards read: GIE's
``tools/dashboards/inference_gateway.json`` queries ``inference_*``, the llm-d dashboards
(llm-d ``guides/recipes/observability/grafana``) query ``llm_d_epp_*``. Our own series
(``epp_*``) have one name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar, cast

from prometheus_client import CollectorRegistry

from epp import __version__
from epp.config.options import MetricsNaming
from epp.kvevents.index import KvBlockIndex
from epp.kvevents.ingest import SourceCounts
from epp.telemetry.families import Families, Names
from epp.telemetry.series import Counter, Gauge, Histogram

__all__ = ["EppMetrics"]

SeriesT = TypeVar("SeriesT")

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
_SCRAPE_INTERVAL_BUCKETS = (0.025, 0.05, 0.055, 0.06, 0.0667, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.0, 5.0)

_OBJECTIVE = ("model_name", "target_model_name")
_REQUEST = (*_OBJECTIVE, "fairness_id", "priority")
"""The llm-d request labels; values are always given in this order (GIE's series take a subset)."""
_PLUGIN = ("plugin_name", "plugin_type")
_ENDPOINT = ("endpoint_name", "namespace")
_FLOW = ("fairness_id", "priority", "inference_pool", *_OBJECTIVE)
"""Flow-control queue labels; values always in this order."""
_QUEUE_DURATION_BUCKETS = (
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip


def _request(gie: str, llm_d: str, gie_help: str, llm_d_help: str, *, gie_labels: tuple[str, ...]) -> Names:
    return Names(gie, llm_d, gie_help, llm_d_help, labels=_REQUEST, gie_labels=gie_labels)


def _pool(gie: str, llm_d: str, gie_help: str, llm_d_help: str = "") -> Names:
    return Names(gie, llm_d, gie_help, llm_d_help, labels=("name",))


class EppMetrics:
    """Every series the picker exports; components receive this object, not the registry."""

    def __init__(self, registry: CollectorRegistry | None = None, *, naming: MetricsNaming = "both") -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.naming: MetricsNaming = naming
        """Which of upstream's names the series carry; areas that declare their own families use it too."""
        r = self.registry
        f = Families(r, naming)
        self.families = f
        self._sets: dict[object, object] = {}
        # Requests: values in _REQUEST order (model, target model, fairness id, priority).
        self.request_total = f.counter(
            _request(
                "inference_objective_request_total",
                "llm_d_epp_request_total",
                "Counter of inference objective requests broken out for each model and target model.",
                "Total number of processed requests.",
                gie_labels=(*_OBJECTIVE, "priority"),
            )
        )
        self.legacy_request_total = f.counter(  # v0.3's counter; the llm-d router has no such series
            Names(
                "inference_model_request_total",
                None,
                "Counter of inference model requests broken out for each model and target model.",
                labels=_REQUEST,
                gie_labels=_OBJECTIVE,
            )
        )
        self.request_error_total = f.counter(  # values: _REQUEST, then the error code
            Names(
                "inference_objective_request_error_total",
                "llm_d_epp_request_error_total",
                "Counter of inference objective requests errors broken out for each model and target model.",
                "Total number of request errors.",
                labels=(*_REQUEST, "error_code"),
                gie_labels=(*_OBJECTIVE, "error_code"),
            )
        )
        self.request_duration = f.histogram(
            _request(
                "inference_objective_request_duration_seconds",
                "llm_d_epp_request_duration_seconds",
                "Inference objective response latency distribution in seconds for each model and target model.",
                "End-to-end request latency distribution in seconds.",
                gie_labels=_OBJECTIVE,
            ),
            _DURATION_BUCKETS,
        )
        self.request_sizes = f.histogram(
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
        self.prompt_cached_tokens = f.histogram(
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
        self.running_requests = f.gauge(
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
        # Pool gauges (label ``name`` = pool name).
        self.pool_avg_kv = f.gauge(
            _pool(
                "inference_pool_average_kv_cache_utilization",
                "llm_d_epp_average_kv_cache_utilization",
                "The average kv cache utilization for an inference server pool.",
            )
        )
        self.pool_avg_queue = f.gauge(
            _pool(
                "inference_pool_average_queue_size",
                "llm_d_epp_average_queue_size",
                "The average number of requests pending in the model server queue.",
            )
        )
        self.pool_avg_running = f.gauge(
            _pool(
                "inference_pool_average_running_requests",
                "llm_d_epp_average_running_requests",
                "The average number of running requests across all pods in the inference pool.",
                "The average number of running requests across model servers in the pool.",
            )
        )
        self.pool_ready_pods = f.gauge(
            _pool(
                "inference_pool_ready_pods",
                "llm_d_epp_ready_endpoints",
                "The number of ready pods in the inference server pool.",
                "The number of ready endpoints in the inference server pool.",
            )
        )
        self.inflight_requests = f.gauge(  # values: endpoint name, namespace
            Names(
                None,
                "llm_d_epp_inflight_requests",
                "Current number of in-flight requests per endpoint, as tracked by the picker "
                "(routed, response not yet ended).",
                labels=_ENDPOINT,
            )
        )
        self.inflight_tokens = f.gauge(  # values: endpoint name, namespace
            Names(
                None,
                "llm_d_epp_inflight_tokens",
                "Current number of in-flight tokens per endpoint (estimated prompt tokens, optionally plus "
                "estimated output), as tracked by the picker.",
                labels=_ENDPOINT,
            )
        )
        self.pool_per_pod_queue = f.gauge(
            Names(
                "inference_pool_per_pod_queue_size",
                "llm_d_epp_per_endpoint_queue_size",
                "The total number of requests pending in the model server queue for each underlying pod.",
                "The total number of requests pending in the model server queue for each underlying endpoint.",
                labels=("name", "model_server_endpoint"),
                gie_labels=("name", "model_server_pod"),
                renamed={"model_server_pod": "model_server_endpoint"},
            )
        )
        # Scheduler and plugins.
        self.scheduler_e2e = f.histogram(
            Names(
                "inference_extension_scheduler_e2e_duration_seconds",
                "llm_d_epp_scheduler_e2e_duration_seconds",
                "Scheduling latency distribution in seconds.",
                "End-to-end scheduling latency distribution in seconds.",
            ),
            _SCHEDULER_BUCKETS,
        )
        self.scheduler_attempts = f.counter(
            Names(
                "inference_extension_scheduler_attempts_total",
                "llm_d_epp_scheduler_attempts_total",
                "Total number of scheduling attempts.",
                labels=("status", "target_model_name", "endpoint_name", "namespace", "port"),
                gie_labels=("status", "target_model_name", "pod_name", "namespace", "port"),
                renamed={"pod_name": "endpoint_name"},
            )
        )
        self.plugin_duration = f.histogram(
            Names(
                "inference_extension_plugin_duration_seconds",
                "llm_d_epp_plugin_duration_seconds",
                "Plugin processing latency distribution in seconds for each extension point, plugin type and name.",
                "Plugin processing latency distribution in seconds for each extension point, plugin type and "
                "plugin name.",
                labels=("extension_point", "plugin_type", "plugin_name"),
            ),
            _SCHEDULER_BUCKETS,
        )
        self.prefix_indexer_size = f.gauge(  # GIE: the sum over the prefix scorers; llm-d: one series each
            Names(
                "inference_extension_prefix_indexer_size",
                None,
                "Size of the prefix indexer.",
                successor="llm_d_epp_prefix_indexer_size",
            )
        )
        self.prefix_indexer_size_by_plugin = f.gauge(  # values: plugin name, plugin type
            Names(None, "llm_d_epp_prefix_indexer_size", "Size of the prefix indexer.", labels=_PLUGIN)
        )
        self.prefix_indexer_hit_ratio = f.histogram(  # values: plugin name, plugin type
            Names(
                "inference_extension_prefix_indexer_hit_ratio",
                "llm_d_epp_prefix_indexer_hit_ratio",
                "Ratio of prefix length matched to total prefix length in the cache lookup.",
                labels=_PLUGIN,
                gie_labels=(),
            ),
            (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
        )
        self.prefix_indexer_hit_bytes = f.histogram(  # values: plugin name, plugin type
            Names(
                "inference_extension_prefix_indexer_hit_bytes",
                "llm_d_epp_prefix_indexer_hit_bytes",
                "Length of the prefix match in number of bytes in the cache lookup.",
                labels=_PLUGIN,
                gie_labels=(),
            ),
            (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
        )
        self.model_rewrite_decisions = f.counter(
            Names(
                "inference_extension_model_rewrite_decisions_total",
                "llm_d_epp_model_rewrite_decisions_total",
                "Total number of model rewrite decisions.",
                "Total number of inference model rewrite decisions.",
                labels=("model_rewrite_name", "model_name", "target_model"),
            )
        )
        # Flow control (the flowControl feature gate): queue series, values in _FLOW order.
        self.fc_queue_size = f.gauge(
            Names(
                "inference_extension_flow_control_queue_size",
                "llm_d_epp_flow_control_queue_size",
                "Current number of requests actively held in the Flow Control queue.",
                labels=_FLOW,
            )
        )
        self.fc_queue_bytes = f.gauge(
            Names(
                "inference_extension_flow_control_queue_bytes",
                "llm_d_epp_flow_control_queue_bytes",
                "Current total size in bytes of requests actively held in the Flow Control queue.",
                labels=_FLOW,
            )
        )
        self.fc_queue_duration = f.histogram(  # values: fairness id, priority, outcome, pool, model, target
            Names(
                "inference_extension_flow_control_request_queue_duration_seconds",
                "llm_d_epp_flow_control_request_queue_duration_seconds",
                "Distribution of total time requests spend in the Flow Control layer (from enqueue to final outcome).",
                labels=("fairness_id", "priority", "outcome", "inference_pool", *_OBJECTIVE),
            ),
            _QUEUE_DURATION_BUCKETS,
        )
        self.fc_dispatch_cycle = f.histogram(
            Names(
                "inference_extension_flow_control_dispatch_cycle_duration_seconds",
                "llm_d_epp_flow_control_dispatch_cycle_duration_seconds",
                "Distribution of time taken for each internal dispatch cycle in the Flow Control layer.",
            ),
            _SCHEDULER_BUCKETS,
        )
        self.fc_pool_saturation = f.gauge(  # values: pool, stage (this picker gates on "effective" only)
            Names(
                "inference_extension_flow_control_pool_saturation",
                "llm_d_epp_flow_control_pool_saturation",
                "Current saturation level of the inference pool (0.0 = empty, 1.0 = fully saturated).",
                "Pool saturation signal gating Flow Control dispatch. 1.0 is the gating set point; values above "
                "1.0 indicate the magnitude of oversubscription past it. An empty pool reads as 1.0.",
                labels=("inference_pool", "stage"),
                gie_labels=("inference_pool",),
            )
        )
        self.fc_requests = f.counter(  # values: outcome, priority, pool
            Names(
                None,
                "llm_d_epp_flow_control_requests_total",
                "Total number of requests processed by the Flow Control layer.",
                labels=("outcome", "priority", "inference_pool"),
            )
        )
        self.info = f.gauge(
            Names(
                "inference_extension_info",
                "llm_d_epp_info",
                "General information of the current build of Inference Extension.",
                labels=("commit", "build_ref"),
            )
        )
        self.info.labels("", f"epp-{__version__}").set(1)
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
        self.scrape_interval = Histogram(
            "epp_scrape_interval_seconds",
            "Seconds between two successful scrapes of the same model server (the interval achieved).",
            ("engine",),
            buckets=_SCRAPE_INTERVAL_BUCKETS,
            registry=r,
        )
        self.endpoint_scrape_interval = Gauge(
            "epp_endpoint_scrape_interval_seconds",
            "Per endpoint: seconds between its last two successful scrapes (absent until two).",
            ("name", "model_server_endpoint"),
            registry=r,
        )
        self.endpoint_metrics_age = Gauge(
            "epp_endpoint_metrics_age_seconds",
            "Per endpoint: seconds since its last successful scrape (absent until one).",
            ("name", "model_server_endpoint"),
            registry=r,
        )
        self.scrape_worker_restarts = Counter(
            "epp_scrape_worker_restarts_total",
            "Times the scrape worker process (--metrics-scrape-process) ended and was started again.",
            registry=r,
        )
        self.scrape_errors = Counter(
            "epp_scrape_errors_total",
            "Failed /metrics scrapes of model servers, by reason (timeout, http, connect, parse).",
            ("reason",),
            registry=r,
        )
        self.ready = Gauge(
            "epp_ready",
            "1 while the health port reports readiness SERVING (every pool synced and, with leader election, "
            "the lease held), else 0; 0 from the start of a graceful drain.",
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
        self.config_ignored_settings = Gauge(
            "epp_config_ignored_settings",
            "1 for each setting of the loaded EndpointPickerConfig that this picker does not implement and "
            "runs without (the log says why); 0 once a configuration no longer has it.",
            ("setting",),
            registry=r,
        )
        self.shadowed_objects = Gauge(
            "epp_api_group_shadowed_objects",
            "Objects of inference.networking.x-k8s.io ignored because an object of the same kind, namespace "
            "and name exists in llm-d.ai, which wins (both groups are watched and merged).",
            ("pool", "kind"),
            registry=r,
        )
        self.endpoint_health = Gauge(
            "epp_endpoint_health",
            "1 for the health state each endpoint is in (healthy, suspect, unreachable, ejected), 0 for the "
            "others; from scrapes and the responses of requests routed there.",
            ("namespace", "endpoint_name", "state"),
            registry=r,
        )
        self.endpoint_health_transitions = Counter(
            "epp_endpoint_health_transitions_total",
            "Endpoint health state changes, by endpoint and the states left and entered (the log says why).",
            ("namespace", "endpoint_name", "from_state", "to_state"),
            registry=r,
        )
        self.endpoint_health_fail_open = Counter(
            "epp_endpoint_health_fail_open_total",
            "Requests scheduled over every candidate because none was routable (all unreachable or ejected).",
            ("name",),
            registry=r,
        )
        # KV-event subscribers (precise-prefix-cache-producer), by endpoint: the llm-d router's names
        # where it has the series (pkg/kvcache/metrics), ours for what only this subscriber counts.
        pod = ("pod_identifier",)

        def per_pod(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, pod, registry=r)

        # Only llm-d has these (none under --metrics-naming=gie).
        upstream = naming != "gie"
        self.kv_events_subscribers = (
            Gauge(
                "llm_d_epp_kv_cache_events_active_subscribers",
                "Number of ZMQ subscribers currently managed, including those retrying a failed connection",
                registry=r,
            )
            if upstream
            else None
        )
        llm_d_counts = (
            (
                (
                    "messages",
                    per_pod(
                        "llm_d_epp_kv_cache_events_messages_received_total",
                        "Total number of messages received from ZMQ subscribers",
                    ),
                ),
                (
                    "reconnections",
                    per_pod(
                        "llm_d_epp_kv_cache_events_subscriber_reconnections_total",
                        "Total number of ZMQ subscriber reconnection attempts",
                    ),
                ),
            )
            if upstream
            else ()
        )
        self._kv_event_counts = (
            *llm_d_counts,
            (
                "gaps",
                per_pod(
                    "epp_kv_events_gaps_total",
                    "KV-event sequence gaps (messages missed): the endpoint's entries are replayed or cleared.",
                ),
            ),
            (
                "replays",
                per_pod("epp_kv_events_replays_total", "Replays requested from the endpoint's replay socket."),
            ),
            (
                "restarts",
                per_pod(
                    "epp_kv_events_publisher_restarts_total",
                    "KV-event publisher restarts seen (sequence going backwards): the endpoint's entries are cleared.",
                ),
            ),
            (
                "decode_errors",
                per_pod(
                    "epp_kv_events_decode_errors_total",
                    "KV-event messages that were not a vLLM EventBatch: the endpoint's entries are cleared.",
                ),
            ),
            (
                "disconnects",
                per_pod(
                    "epp_kv_events_disconnects_total",
                    "Connections to the endpoint's KV-event publisher dropped: its entries are cleared.",
                ),
            ),
        )
        self.kv_events_stores_skipped = Counter(
            "epp_kv_events_stores_skipped_total",
            "BlockStored events not indexed (unknown parent block, block size not a multiple of the "
            "index's, a tier other than GPU, no model in the topic).",
            registry=r,
        )
        self.kv_events_unattributed = Counter(
            "epp_kv_events_unattributed_total",
            "KV-event messages on the central socket (zmqEndpoint) whose topic kv@<ip>:<port>@<model> names "
            "no endpoint of the pool: dropped.",
            registry=r,
        )
        self.kv_events_index_blocks = Gauge(
            "epp_kv_events_index_blocks",
            "Engine KV blocks the precise prefix index holds for each endpoint, from its KV events.",
            pod,
            registry=r,
        )
        self._prefix_plugins: set[tuple[str, str]] = set()
        self._kv_event_pods: set[str] = set()

    def series(self, declare: Callable[[EppMetrics], SeriesT]) -> SeriesT:
        """The series set ``declare`` (a class an area declares next to its code) makes: declared on
        first use, the same object after, so every pool and reload writes the same series."""
        found = self._sets.get(declare)
        if found is None:
            found = self._sets[declare] = declare(self)
        return cast(SeriesT, found)

    def set_prefix_indexer_sizes(self, sizes: Mapping[tuple[str, str], int]) -> None:
        """Each prefix scorer's index size by (plugin name, plugin type); GIE's gauge gets their sum."""
        self.prefix_indexer_size.set(sum(sizes.values()))
        family = self.prefix_indexer_size_by_plugin
        for gone in self._prefix_plugins - sizes.keys():
            family.remove(*gone)
        for (name, type_name), size in sizes.items():
            family.labels(name, type_name).set(size)
        self._prefix_plugins = set(sizes)

    def set_kv_events(
        self, sources: Iterable[SourceCounts], indexes: Iterable[KvBlockIndex], *, active: int, unattributed: int = 0
    ) -> None:
        """Mirror the KV-event sources' counts and the precise indexes' sizes (summed per endpoint).

        The counts live on the sources (plain increments on their tasks): a dialled subscriber per
        endpoint, or one stream per engine heard on the central socket; one made anew (a
        configuration reload, an endpoint back) starts from 0, which Prometheus reads as a counter
        reset. Endpoints without a source lose their series, as llm-d's do. ``active`` is the
        number of subscriber sockets, ``unattributed`` the central sockets' dropped messages.
        """
        totals: dict[str, list[int]] = {}
        for subscriber in sources:
            counts = totals.setdefault(subscriber.pod, [0] * len(self._kv_event_counts))
            for i, (attribute, _) in enumerate(self._kv_event_counts):
                counts[i] += getattr(subscriber, attribute)
        if self.kv_events_subscribers is not None:
            self.kv_events_subscribers.set(active)
        blocks: dict[str, int] = dict.fromkeys(totals, 0)
        skipped = 0
        for index in indexes:
            skipped += index.skipped
            for pod in index.endpoints():
                blocks[pod] = blocks.get(pod, 0) + index.blocks(pod)
        self.kv_events_stores_skipped.mirror(skipped)
        self.kv_events_unattributed.mirror(unattributed)
        for gone in self._kv_event_pods - blocks.keys():
            for _, series in self._kv_event_counts:
                series.remove(gone)
            self.kv_events_index_blocks.remove(gone)
        for pod, counts in totals.items():
            for (_, series), count in zip(self._kv_event_counts, counts, strict=True):
                series.labels(pod).mirror(count)
        for pod, n in blocks.items():
            self.kv_events_index_blocks.labels(pod).set(n)
        self._kv_event_pods = set(blocks)
