"""The wire names the picker reads and writes: HTTP headers and Envoy metadata keys, in one table.

Upstream's names, verbatim (``pkg/epp/util/request/headers.go``, ``pkg/epp/metadata``): the
gateway, its routes and its clients spell them this way, so they are defined once here and every
layer (the ext_proc stream, the director, the pool dispatcher, plugins) imports them.
Header names are lower case, as Envoy hands them over.
"""

from __future__ import annotations

__all__ = [
    "DESTINATION_ENDPOINT",
    "DESTINATION_ENDPOINT_SERVED",
    "DESTINATION_ENDPOINT_SUBSET",
    "FAIRNESS_ID",
    "INFERENCE_POOL",
    "LB_METADATA_NAMESPACE",
    "MODEL_NAME_REWRITE",
    "OBJECTIVE",
    "REQUEST_ID",
    "SUBSET_HINT_NAMESPACE",
    "SYSTEM_OWNED",
    "WENT_INTO_RESP_HEADERS",
]

REQUEST_ID = "x-request-id"
"""The request's id; the picker makes one up (a UUID) when the client sent none."""

OBJECTIVE = "x-gateway-inference-objective"
"""Names the InferenceObjective whose priority the request takes."""

MODEL_NAME_REWRITE = "x-gateway-model-name-rewrite"
"""Set by a route: the model the server is sent, instead of the body's ``model``."""

FAIRNESS_ID = "x-gateway-inference-fairness-id"
"""The flow (tenant) a request belongs to, for flow control."""

INFERENCE_POOL = "x-gateway-inference-pool"
"""Ours: names the pool (``name`` or ``namespace/name``) when one picker serves several."""

DESTINATION_ENDPOINT = "x-gateway-destination-endpoint"
"""The picked ``ip:port`` (comma-separated fallbacks), as a header and as an ``envoy.lb`` metadata key."""

DESTINATION_ENDPOINT_SUBSET = "x-gateway-destination-endpoint-subset"
"""The metadata key, under :data:`SUBSET_HINT_NAMESPACE`, of the endpoints the gateway allows."""

DESTINATION_ENDPOINT_SERVED = "x-gateway-destination-endpoint-served"
"""Reported back by the data plane: the endpoint that really served the request."""

WENT_INTO_RESP_HEADERS = "x-went-into-resp-headers"
"""Upstream's marker on every response the picker processed."""

LB_METADATA_NAMESPACE = "envoy.lb"
"""The dynamic-metadata namespace Envoy's ORIGINAL_DST cluster reads the destination from."""

SUBSET_HINT_NAMESPACE = "envoy.lb.subset_hint"
"""The request metadata namespace in which the gateway passes the subset hint."""

SYSTEM_OWNED = frozenset(
    {
        FAIRNESS_ID,
        OBJECTIVE,
        MODEL_NAME_REWRITE,
        DESTINATION_ENDPOINT_SUBSET,
        DESTINATION_ENDPOINT,
        DESTINATION_ENDPOINT_SERVED,
        "content-length",
    }
)
"""Headers the picker never echoes back to Envoy (it owns them, or recomputes them)."""
