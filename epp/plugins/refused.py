"""The llm-d router's plugin types this picker does not have, each refused at load by name with the reason.

No type a configuration names is ever silently ignored: every type in the router's registry
(``cmd/epp/runner/runner.go``) is either registered by :func:`epp.plugins.register_in_tree` or
listed here, and a configuration naming one of these fails to load with its reason
(``PluginRegistry.refuse``). A type that gains an in-tree plugin is registered and its entry here
removed (``register_in_tree`` refuses only what is not registered, and a test fails on an entry
that is); ``docs/plugin-types.md`` (generated: ``scripts/plugin_type_table.py``) says which is which.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["REFUSED"]

_MULTICLUSTER = (
    "multi-cluster routing (the router's Alpha multicluster-* plugins over peer clusters) is not built: "
    "this picker routes to the endpoints of its own pools"
)
_MULTIMODAL = (
    "multimodal encoder-cache affinity is not built: this picker does not track which endpoint holds "
    "which image or audio embedding"
)
_CONFORMANCE = (
    "a plugin of the GIE conformance suite: this picker serves the same test hooks with --enable-conformance-test-hooks"
)

REFUSED: Mapping[str, str] = MappingProxyType(
    {
        # Request parsers of transports this picker does not decode.
        "vllmgrpc-parser": (
            "vLLM's gRPC API (H2C bodies framed as vllm_engine.proto messages) is not decoded here: the ext_proc "
            "path reads JSON bodies; use vLLM's HTTP API (openai-parser, vllmhttp-parser)"
        ),
        "vertexai-parser": (
            "Vertex AI's gRPC prediction envelopes (aiplatform protobufs around an HttpBody) are not decoded "
            "here: the ext_proc path reads JSON bodies; send the OpenAI-compatible JSON directly (openai-parser)"
        ),
        # Data layer sources and extractors.
        "models-data-source": (
            "polling each endpoint's /v1/models is not built: the served models and adapters come from the "
            "model servers' metrics (core-metrics-extractor)"
        ),
        "models-data-extractor": "pairs with models-data-source, which is not built",
        "dcgm-data-source": (
            "GPU hardware metrics from NVIDIA's DCGM exporter are not scraped: no in-tree plugin reads GPU utilisation"
        ),
        "dcgm-extractor": "pairs with dcgm-data-source, which is not built",
        "k8s-notification-source": (
            "watching arbitrary Kubernetes objects for extractors is not built: endpoint changes reach plugins "
            "through endpoint-notification-source"
        ),
        "multicluster-file-discovery": _MULTICLUSTER,
        "multicluster-metrics-data-source": _MULTICLUSTER,
        "multicluster-metrics-extractor": _MULTICLUSTER,
        "multicluster-session-affinity-filter": _MULTICLUSTER,
        "multicluster-queue-scorer": _MULTICLUSTER,
        "multicluster-kv-cache-utilization-scorer": _MULTICLUSTER,
        "multicluster-prefix-cache-scorer": _MULTICLUSTER,
        "multicluster-approx-prefix-cache-producer": _MULTICLUSTER,
        # Request control.
        "mm-embeddings-cache-producer": _MULTIMODAL,
        "mm-embeddings-cache-scorer": _MULTIMODAL,
        "p2p-source-producer": (
            "peer-to-peer KV-cache pulls (x-kv-cache-source-host-port for the routing sidecar's P2P connector) "
            "are not built"
        ),
        "disaggregatedset-rollout-screener": (
            "needs the DisaggregatedSet controller's revision labels and a request screener stage, neither of "
            "which this picker has"
        ),
        "header-based-testing-filter": _CONFORMANCE,
        "destination-endpoint-served-verifier": _CONFORMANCE,
        # Flow control: eviction and priority-stepped usage limits.
        "sheddable-eviction-filter": (
            "evicting queued or running requests under overload is not built: the flow-control queue only "
            "sheds at admission and on its TTL"
        ),
        "priority-then-time-eviction-order-policy": "pairs with sheddable-eviction-filter, which is not built",
        "priority-holdback-policy": (
            "per-priority admission ceilings are not built: static-usage-limit-policy sets one ceiling for every "
            "priority"
        ),
        # SLO-deadline queue ordering.
        "slo-deadline-ordering-policy": (
            "ordering the flow-control queue by SLO deadline is not built (SLO-aware scheduling is: "
            "predicted-latency-producer, slo-headroom-tier-filter, latency-scorer, latency-slo-admitter)"
        ),
    }
)
