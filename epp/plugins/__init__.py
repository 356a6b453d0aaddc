"""In-tree plugins and the one list that registers them by their upstream type names.

Each plugin module imports only ``epp.framework``; nothing registers itself on import. The runtime
(and tests) call :func:`register_in_tree` on a registry they own. The llm-d router's types without
an in-tree plugin are registered too, to be refused at load by name with the reason (``refused.py``).
"""

from __future__ import annotations

from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, SESSION_ID, TOKENIZED_PROMPT
from epp.framework.plugin import PluginFactory, PluginRegistry
from epp.plugins import (
    agent_identity,
    approx_prefix_producer,
    burst_prefix_producer,
    by_label_filter,
    concurrency_detector,
    context_length_aware,
    core_metrics_extractor,
    data_parallel,
    disagg_headers,
    disagg_profile_handler,
    endpoint_attribute_filter,
    endpoint_attribute_scorer,
    endpoint_notification_source,
    file_discovery,
    flow_policies,
    header_label_affinity_scorer,
    header_profile_handler,
    inflight_load,
    inflight_scorers,
    kv_cache_scorer,
    label_selector_filter,
    latency_scorer,
    latency_slo_admitter,
    legacy_filter_tree,
    load_aware_scorer,
    lora_affinity_scorer,
    metrics_data_source,
    no_hit_lru_scorer,
    parsers,
    pd_deciders,
    pd_profile_handler,
    pickers,
    precise_prefix_producer,
    precise_prefix_scorer,
    predicted_latency_producer,
    prefix_cache_affinity_filter,
    prefix_cache_scorer,
    probabilistic_admitter,
    program_aware_fairness,
    queue_scorer,
    refused,
    request_attribute_reporter,
    role_filters,
    running_requests_scorer,
    session_affinity_filter,
    session_affinity_scorer,
    session_id_producer,
    single_profile,
    slo_headroom_tier_filter,
    soft_reflective_ceiling,
    token_producer,
    topology_affinity_filter,
    topology_affinity_scorer,
    topology_extractor,
    utilization_detector,
    utilization_filter,
)

__all__ = ["register_in_tree"]

# The single list of in-tree type names → factories.
_IN_TREE: tuple[tuple[str, PluginFactory], ...] = (
    (queue_scorer.TYPE, queue_scorer.create),
    (kv_cache_scorer.TYPE, kv_cache_scorer.create),
    (lora_affinity_scorer.TYPE, lora_affinity_scorer.create),
    (prefix_cache_scorer.TYPE, prefix_cache_scorer.create),
    (running_requests_scorer.TYPE, running_requests_scorer.create),
    # In-flight load: the estimate of each request's tokens, and the scorers that read the counts.
    (inflight_load.TYPE, inflight_load.create),
    (inflight_scorers.TOKEN_LOAD_TYPE, inflight_scorers.create_token_load),
    (inflight_scorers.ACTIVE_REQUEST_TYPE, inflight_scorers.create_active_request),
    (session_affinity_scorer.TYPE, session_affinity_scorer.create),
    # llm-d's precise prefix-cache routing: token-producer → precise-prefix-cache-producer → prefix-cache-scorer.
    (token_producer.TYPE, token_producer.create),
    (token_producer.LEGACY_TYPE, token_producer.create),  # upstream's deprecated name, same plugin
    (precise_prefix_producer.TYPE, precise_prefix_producer.create),
    # ... and its deprecated all-in-one form (a composition of the producer and the scorer).
    (precise_prefix_scorer.TYPE, precise_prefix_scorer.create),
    (pickers.MAX_SCORE_TYPE, pickers.create_max_score),
    (pickers.RANDOM_TYPE, pickers.create_random),
    (pickers.WEIGHTED_RANDOM_TYPE, pickers.create_weighted_random),
    (single_profile.TYPE, single_profile.create),
    # Disaggregated serving (P/D, E/P/D): role filters, deciders, the handler and its deprecated forms.
    (role_filters.PREFILL_TYPE, role_filters.create_prefill),
    (role_filters.DECODE_TYPE, role_filters.create_decode),
    (role_filters.ENCODE_TYPE, role_filters.create_encode),
    (pd_deciders.PREFIX_BASED_TYPE, pd_deciders.create_prefix_based),
    (pd_deciders.ALWAYS_PD_TYPE, pd_deciders.create_always_pd),
    (pd_deciders.ALWAYS_MULTIMODAL_TYPE, pd_deciders.create_always_multimodal),
    (disagg_profile_handler.TYPE, disagg_profile_handler.create),
    (pd_profile_handler.TYPE, pd_profile_handler.create),
    (disagg_headers.TYPE, disagg_headers.create),
    (disagg_headers.ALIAS_TYPE, disagg_headers.create_alias),
    # Data-parallel ranks behind one port (deprecated upstream: gateways now route to each rank's port).
    (data_parallel.TYPE, data_parallel.create),
    (utilization_detector.TYPE, utilization_detector.create),
    (legacy_filter_tree.TYPE, legacy_filter_tree.create),
    (concurrency_detector.TYPE, concurrency_detector.create),
    # Flow control (used with the flowControl feature gate).
    (flow_policies.FCFS_TYPE, flow_policies.create_fcfs),
    (flow_policies.EDF_TYPE, flow_policies.create_edf),
    (flow_policies.GLOBAL_STRICT_TYPE, flow_policies.create_global_strict),
    (flow_policies.ROUND_ROBIN_TYPE, flow_policies.create_round_robin),
    (flow_policies.STATIC_USAGE_LIMIT_TYPE, flow_policies.create_static_usage_limit),
    # The data layer: what the scraper runs (wired by the loader as dataLayer.sources says).
    (metrics_data_source.TYPE, metrics_data_source.create),
    (core_metrics_extractor.TYPE, core_metrics_extractor.create),
    (endpoint_notification_source.TYPE, endpoint_notification_source.create),
    # Endpoints from a file, for a picker without Kubernetes (dataLayer.discovery).
    (file_discovery.TYPE, file_discovery.create),
    # Request parsers: the path claims of requestHandler.parsers (ext_proc decodes by the claimed API).
    (parsers.OPENAI_TYPE, parsers.create_openai),
    (parsers.ANTHROPIC_TYPE, parsers.create_anthropic),
    (parsers.VLLM_HTTP_TYPE, parsers.create_vllm_http),
    (parsers.PASSTHROUGH_TYPE, parsers.create_passthrough),
    # llm-d router filters.
    (label_selector_filter.TYPE, label_selector_filter.create),
    (label_selector_filter.DEPRECATED_TYPE, label_selector_filter.create_deprecated),
    (by_label_filter.TYPE, by_label_filter.create),
    (session_affinity_filter.TYPE, session_affinity_filter.create),
    (prefix_cache_affinity_filter.TYPE, prefix_cache_affinity_filter.create),
    (utilization_filter.TYPE, utilization_filter.create),
    (endpoint_attribute_filter.TYPE, endpoint_attribute_filter.create),
    (topology_affinity_filter.TYPE, topology_affinity_filter.create),
    # llm-d router scorers (context-length-aware is also a filter), and the topology they read.
    (load_aware_scorer.TYPE, load_aware_scorer.create),
    (no_hit_lru_scorer.TYPE, no_hit_lru_scorer.create),
    (context_length_aware.TYPE, context_length_aware.create),
    (header_label_affinity_scorer.TYPE, header_label_affinity_scorer.create),
    (endpoint_attribute_scorer.TYPE, endpoint_attribute_scorer.create),
    (topology_affinity_scorer.TYPE, topology_affinity_scorer.create),
    (topology_extractor.TYPE, topology_extractor.create),
    # Profile handler, admission plugin, response reporter, flow control.
    (header_profile_handler.TYPE, header_profile_handler.create),
    (probabilistic_admitter.TYPE, probabilistic_admitter.create),
    (request_attribute_reporter.TYPE, request_attribute_reporter.create),
    (program_aware_fairness.TYPE, program_aware_fairness.create),
    (soft_reflective_ceiling.TYPE, soft_reflective_ceiling.create),
    # SLO-aware routing: predicted latency per candidate, the tier filter, the scorer, the admitter.
    (predicted_latency_producer.TYPE, predicted_latency_producer.create),
    (slo_headroom_tier_filter.TYPE, slo_headroom_tier_filter.create),
    (latency_scorer.TYPE, latency_scorer.create),
    (latency_slo_admitter.TYPE, latency_slo_admitter.create),
    (parsers.SGLANG_HTTP_TYPE, parsers.create_sglang_http),
    # Data producers of request data (and of endpoint data per request): the prefix-match producers, the session id.
    (approx_prefix_producer.TYPE, approx_prefix_producer.create),
    (burst_prefix_producer.TYPE, burst_prefix_producer.create),
    (session_id_producer.TYPE, session_id_producer.create),
    # Request-header processors: an agent session's identity as the request's flow.
    (agent_identity.TYPE, agent_identity.create),
)

# The type the loader adds to a configuration that reads a data key nobody produces (upstream's
# RegisterAsDefaultProducer): data key id → type.
_DEFAULT_PRODUCERS = {
    TOKENIZED_PROMPT.id: token_producer.TYPE,
    PREFIX_CACHE_MATCH_INFO.id: approx_prefix_producer.TYPE,
    SESSION_ID.id: session_id_producer.TYPE,
}
_DEFAULT_FOR = {type_name: key for key, type_name in _DEFAULT_PRODUCERS.items()}

# Types the llm-d router registers with Alpha stability (cmd/epp/runner/runner.go): a configuration
# may use them only with --allow-experimental-plugins. Every other type above is Beta there (or,
# legacy-filter-tree, GIE v0.3's, which had no stability levels).
_EXPERIMENTAL = frozenset(
    {
        agent_identity.TYPE,
        session_affinity_scorer.TYPE,
        session_affinity_filter.TYPE,
        utilization_filter.TYPE,
        endpoint_attribute_filter.TYPE,
        topology_affinity_filter.TYPE,
        header_label_affinity_scorer.TYPE,
        endpoint_attribute_scorer.TYPE,
        topology_affinity_scorer.TYPE,
        topology_extractor.TYPE,
        header_profile_handler.TYPE,
        soft_reflective_ceiling.TYPE,
        burst_prefix_producer.TYPE,
    }
)


def register_in_tree(registry: PluginRegistry) -> None:
    """Register every in-tree plugin type on ``registry``, then refuse by name the llm-d router's others."""
    for type_name, factory in _IN_TREE:
        registry.register(
            type_name,
            factory,
            experimental=type_name in _EXPERIMENTAL,
            default_for=_DEFAULT_FOR.get(type_name, ""),
        )
    known = set(registry.types())
    for type_name, reason in refused.REFUSED.items():
        if type_name not in known:
            registry.refuse(type_name, reason)
