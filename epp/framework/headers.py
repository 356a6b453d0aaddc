"""The wire names the picker reads and writes: HTTP headers and Envoy metadata keys, in one table.

Upstream's names, verbatim (``pkg/epp/util/request/headers.go``, ``pkg/epp/metadata``): the
gateway, its routes and its clients spell them this way, so they are defined once here and every
layer (the ext_proc stream, the request pipeline, the pool dispatcher, plugins) imports them.
Header names are lower case, as Envoy hands them over.

The llm-d router renamed the control headers (``x-gateway-inference-objective`` became
``x-llm-d-inference-objective``, ...) and still reads the old names as deprecated aliases. So do
we: read a control header with :func:`read`, never ``headers.get``. One precedence rule, upstream's
(``metadata.GetLowerCaseHeaderValue``): the llm-d spelling wins when a request carries both, even
when its value is empty. Every spelling is system-owned, so none is echoed to the model server.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "ALIASES",
    "CONFORMANCE_SERVED_ENDPOINT",
    "DEFAULT_FAIRNESS_ID",
    "DESTINATION_ENDPOINT",
    "DESTINATION_ENDPOINT_SCORES",
    "DESTINATION_ENDPOINT_SERVED",
    "DESTINATION_ENDPOINT_SUBSET",
    "DATA_PARALLEL_HOST_PORT",
    "ENCODER_HOSTS_PORTS",
    "FAIRNESS_ID",
    "KV_CACHE_SOURCE_HOST_PORT",
    "INFERENCE_POOL",
    "LB_METADATA_NAMESPACE",
    "LLM_D_FAIRNESS_ID",
    "LLM_D_MODEL_NAME_REWRITE",
    "LLM_D_OBJECTIVE",
    "MODEL_NAME_REWRITE",
    "OBJECTIVE",
    "PREFILLER_HOST_PORT",
    "REQUEST_DROPPED_REASON",
    "REQUEST_ID",
    "SUBSET_HINT_NAMESPACE",
    "SYSTEM_OWNED",
    "TEST_ENDPOINT_SELECTION",
    "TPOT_SLO",
    "TTFT_SLO",
    "UPSTREAM_SERVICE_TIME",
    "WENT_INTO_RESP_HEADERS",
    "read",
]

REQUEST_ID = "x-request-id"
"""The request's id; the picker makes one up (a UUID) when the client sent none."""

OBJECTIVE = "x-gateway-inference-objective"
"""Names the InferenceObjective whose priority the request takes."""

MODEL_NAME_REWRITE = "x-gateway-model-name-rewrite"
"""Set by a route: the model the server is sent, instead of the body's ``model``."""

FAIRNESS_ID = "x-gateway-inference-fairness-id"
"""The flow (tenant) a request belongs to, for flow control and the ``fairness_id`` metric label."""

DEFAULT_FAIRNESS_ID = "default-flow"
"""The flow of a request that names none."""

REQUEST_DROPPED_REASON = "x-llm-d-request-dropped-reason"
"""On a flow-control rejection: why (``rejected-saturated``, ``rejected-ttl-expired``, ...), as the llm-d router."""

LLM_D_OBJECTIVE = "x-llm-d-inference-objective"
LLM_D_MODEL_NAME_REWRITE = "x-llm-d-model-name-rewrite"
LLM_D_FAIRNESS_ID = "x-llm-d-inference-fairness-id"

TTFT_SLO = "x-llm-d-slo-ttft-ms"
"""The request's time-to-first-token objective in milliseconds (a float), for SLO-aware routing."""

TPOT_SLO = "x-llm-d-slo-tpot-ms"
"""The request's time-per-output-token objective in milliseconds (a float)."""

ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        OBJECTIVE: (LLM_D_OBJECTIVE, OBJECTIVE),
        MODEL_NAME_REWRITE: (LLM_D_MODEL_NAME_REWRITE, MODEL_NAME_REWRITE),
        FAIRNESS_ID: (LLM_D_FAIRNESS_ID, FAIRNESS_ID),
        TTFT_SLO: (TTFT_SLO, "x-slo-ttft-ms"),  # the llm-d router's older names, still accepted
        TPOT_SLO: (TPOT_SLO, "x-slo-tpot-ms"),
    }
)
"""Each control header the picker reads → its spellings, the one that wins first."""

INFERENCE_POOL = "x-gateway-inference-pool"
"""Ours: names the pool (``name`` or ``namespace/name``) when one picker serves several."""

DESTINATION_ENDPOINT = "x-gateway-destination-endpoint"
"""The picked ``ip:port`` (comma-separated fallbacks), as a header and as an ``envoy.lb`` metadata key."""

DESTINATION_ENDPOINT_SCORES = "x-gateway-destination-endpoint-scores"
"""``envoy.lb`` metadata key (``--emit-endpoint-scores``): a struct of ``ip:port`` → weighted score."""

DESTINATION_ENDPOINT_SUBSET = "x-gateway-destination-endpoint-subset"
"""The metadata key, under :data:`SUBSET_HINT_NAMESPACE`, of the endpoints the gateway allows."""

DESTINATION_ENDPOINT_SERVED = "x-gateway-destination-endpoint-served"
"""Reported back by the data plane: the endpoint that really served the request."""

WENT_INTO_RESP_HEADERS = "x-went-into-resp-headers"
"""Upstream's marker on every response the picker processed."""

UPSTREAM_SERVICE_TIME = "x-envoy-upstream-service-time"
"""Envoy's router adds it to every response a model server sent; its own replies (a 503 when it
could not connect, a reset before headers) lack it, and nothing else marks them (Envoy 1.40)."""

TEST_ENDPOINT_SELECTION = "test-epp-endpoint-selection"
"""Conformance suite, request (``--enable-conformance-test-hooks``): ``IP`` or ``IP:port`` list to pick from."""

CONFORMANCE_SERVED_ENDPOINT = "x-conformance-test-served-endpoint"
"""Conformance suite, response (``--enable-conformance-test-hooks``): :data:`DESTINATION_ENDPOINT_SERVED` echoed."""

PREFILLER_HOST_PORT = "x-prefiller-host-port"
"""Disaggregated serving, to the decode pod's sidecar: the prefill pod's ``ip:port`` (a comma list is tolerated)."""

ENCODER_HOSTS_PORTS = "x-encoder-hosts-ports"
"""Disaggregated serving, to the decode pod's sidecar: the encode pods, ``ip:port[,ip:port...]``."""

KV_CACHE_SOURCE_HOST_PORT = "x-kv-cache-source-host-port"
"""Disaggregated serving: a peer holding more of the prompt's KV cache, to pull it from over P2P."""

DATA_PARALLEL_HOST_PORT = "x-data-parallel-host-port"
"""Data-parallel ranks behind one port (the deprecated ``primaryPort`` handlers): the rank's ``ip:port``."""

LB_METADATA_NAMESPACE = "envoy.lb"
"""The dynamic-metadata namespace Envoy's ORIGINAL_DST cluster reads the destination from."""

SUBSET_HINT_NAMESPACE = "envoy.lb.subset_hint"
"""The request metadata namespace in which the gateway passes the subset hint."""

SYSTEM_OWNED = frozenset(
    {
        *(spelling for spellings in ALIASES.values() for spelling in spellings),
        DESTINATION_ENDPOINT_SUBSET,
        DESTINATION_ENDPOINT,
        DESTINATION_ENDPOINT_SERVED,
        "content-length",
    }
)
"""Headers the picker never echoes back to Envoy (it owns them, or recomputes them)."""


def read(headers: Mapping[str, str], name: str) -> str | None:
    """The value of control header ``name`` (one of :data:`ALIASES`) under whichever spelling wins; None if absent."""
    for spelling in ALIASES[name]:
        value = headers.get(spelling)
        if value is not None:
            return value
    return None
