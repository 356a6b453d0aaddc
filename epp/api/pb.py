"""The only import point for the generated ``epp.v1`` modules (``epp/api/v1``, built from ``protos/``).

As :mod:`epp.extproc.pb` does for Envoy's: the rest of ``epp.api`` reads plain names, and the
generated modules, which exist only after the build step (``setup.py build_protos``), are named
in one file.
"""

from __future__ import annotations

from google.protobuf import json_format  # type: ignore[import-untyped]

from epp.api.v1 import config_pb2, endpoints_pb2, explain_pb2
from epp.api.v1.config_pb2 import GetConfigRequest, GetConfigResponse, PoolConfig, ReloadResult
from epp.api.v1.config_pb2_grpc import ConfigServicer, ConfigStub, add_ConfigServicer_to_server
from epp.api.v1.endpoints_pb2 import (
    Endpoint,
    EndpointMetrics,
    ListEndpointsRequest,
    ListEndpointsResponse,
    PoolEndpoints,
)
from epp.api.v1.endpoints_pb2_grpc import EndpointsServicer, EndpointsStub, add_EndpointsServicer_to_server
from epp.api.v1.explain_pb2 import (
    Admission,
    Disaggregation,
    EndpointLatency,
    EndpointScores,
    ExplainRequest,
    ExplainResponse,
    Failure,
    FilterResult,
    LatencyPredictions,
    PluginFailure,
    ProfileExplanation,
    Score,
    ScorerInfo,
    StageExplanation,
)
from epp.api.v1.explain_pb2_grpc import ExplainServicer, ExplainStub, add_ExplainServicer_to_server

__all__ = [
    "API_SERVICES",
    "CONFIG_SERVICE",
    "ENDPOINTS_SERVICE",
    "EXPLAIN_SERVICE",
    "Admission",
    "ConfigServicer",
    "ConfigStub",
    "Disaggregation",
    "Endpoint",
    "EndpointMetrics",
    "EndpointScores",
    "EndpointsServicer",
    "EndpointsStub",
    "ExplainRequest",
    "ExplainResponse",
    "ExplainServicer",
    "ExplainStub",
    "Failure",
    "FilterResult",
    "GetConfigRequest",
    "GetConfigResponse",
    "ListEndpointsRequest",
    "ListEndpointsResponse",
    "PluginFailure",
    "PoolConfig",
    "PoolEndpoints",
    "ProfileExplanation",
    "ReloadResult",
    "Score",
    "ScorerInfo",
    "StageExplanation",
    "add_ConfigServicer_to_server",
    "add_EndpointsServicer_to_server",
    "add_ExplainServicer_to_server",
    "to_json",
    "EndpointLatency",
    "LatencyPredictions",
]

CONFIG_SERVICE: str = config_pb2.DESCRIPTOR.services_by_name["Config"].full_name
ENDPOINTS_SERVICE: str = endpoints_pb2.DESCRIPTOR.services_by_name["Endpoints"].full_name
EXPLAIN_SERVICE: str = explain_pb2.DESCRIPTOR.services_by_name["Explain"].full_name
API_SERVICES: tuple[str, ...] = (CONFIG_SERVICE, ENDPOINTS_SERVICE, EXPLAIN_SERVICE)


def to_json(message: object) -> str:
    """A message as JSON with the proto's field names (as grpcurl prints it)."""
    return str(json_format.MessageToJson(message, preserving_proto_field_name=True))
