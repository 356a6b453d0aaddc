"""The only import point for generated protobuf and gRPC code (Envoy ext_proc, health, reflection).

Envoy's ext_proc v3 messages and service are compiled by the ``epp`` build into
:mod:`epp.extproc.envoy_api` (``setup.py``: xds-protos' descriptors, renamed into our package;
upb-backed, ~1 µs to parse a header message); health and reflection come from grpcio's own
packages. Keeping every generated import here means a regeneration or a switch of proto package
touches one file, and the rest of ``extproc`` reads plain names.
"""

from __future__ import annotations

from google.protobuf.struct_pb2 import ListValue, Struct, Value  # type: ignore[import-untyped]
from grpc_health.v1 import health_pb2
from grpc_health.v1.health_pb2 import HealthCheckRequest, HealthCheckResponse, HealthListRequest, HealthListResponse
from grpc_health.v1.health_pb2_grpc import HealthServicer, HealthStub, add_HealthServicer_to_server
from grpc_reflection.v1alpha import reflection

from epp.extproc.envoy_api import envoy_service_ext_proc_v3_external_processor_pb2 as _ext_proc
from epp.extproc.envoy_api.envoy_config_core_v3_base_pb2 import HeaderMap, HeaderValue, HeaderValueOption
from epp.extproc.envoy_api.envoy_extensions_filters_http_ext_proc_v3_processing_mode_pb2 import ProcessingMode
from epp.extproc.envoy_api.envoy_service_ext_proc_v3_external_processor_pb2 import (
    BodyMutation,
    BodyResponse,
    CommonResponse,
    HeaderMutation,
    HeadersResponse,
    HttpBody,
    HttpHeaders,
    HttpTrailers,
    ImmediateResponse,
    ProcessingRequest,
    ProcessingResponse,
    ProtocolConfiguration,
    StreamedBodyResponse,
    TrailersResponse,
)
from epp.extproc.envoy_api.envoy_service_ext_proc_v3_external_processor_pb2_grpc import (
    ExternalProcessorServicer,
    ExternalProcessorStub,
    add_ExternalProcessorServicer_to_server,
)
from epp.extproc.envoy_api.envoy_type_v3_http_status_pb2 import HttpStatus

__all__ = [
    "BODY_BUFFERED",
    "BODY_FULL_DUPLEX_STREAMED",
    "BODY_NONE",
    "EXT_PROC_SERVICE",
    "HEALTH_SERVICE",
    "OVERWRITE_IF_EXISTS_OR_ADD",
    "REFLECTION_SERVICE",
    "BodyMutation",
    "BodyResponse",
    "CommonResponse",
    "ExternalProcessorServicer",
    "ExternalProcessorStub",
    "HeaderMap",
    "HeaderMutation",
    "HeaderValue",
    "HeaderValueOption",
    "HeadersResponse",
    "HealthCheckRequest",
    "HealthCheckResponse",
    "HealthListRequest",
    "HealthListResponse",
    "HealthServicer",
    "HealthStub",
    "HttpBody",
    "HttpHeaders",
    "HttpStatus",
    "HttpTrailers",
    "ImmediateResponse",
    "ListValue",
    "ProcessingMode",
    "ProcessingRequest",
    "ProcessingResponse",
    "ProtocolConfiguration",
    "StreamedBodyResponse",
    "Struct",
    "TrailersResponse",
    "Value",
    "add_ExternalProcessorServicer_to_server",
    "add_HealthServicer_to_server",
    "enable_server_reflection",
]

EXT_PROC_SERVICE: str = _ext_proc.DESCRIPTOR.services_by_name["ExternalProcessor"].full_name
HEALTH_SERVICE: str = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
REFLECTION_SERVICE: str = reflection.SERVICE_NAME

BODY_NONE: int = ProcessingMode.NONE
BODY_BUFFERED: int = ProcessingMode.BUFFERED
BODY_FULL_DUPLEX_STREAMED: int = ProcessingMode.FULL_DUPLEX_STREAMED
OVERWRITE_IF_EXISTS_OR_ADD: int = HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD

enable_server_reflection = reflection.enable_server_reflection
