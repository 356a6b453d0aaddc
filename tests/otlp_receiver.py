"""Real OTLP receivers on loopback (the collector's side of OTLP, from ``opentelemetry-proto``) and what they got.

Shared by the tracing tests (``tests/telemetry``) and the plain-install test (``test_distribution``):
``async with grpc_receiver() as collector`` serves the collector's ``TraceService`` over gRPC,
``http_receiver()`` its ``POST /v1/traces`` (protobuf); ``collector.endpoint`` is what
``OTEL_EXPORTER_OTLP_ENDPOINT`` should say, ``collector.spans`` fills as spans arrive.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import grpc
from aiohttp import web
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.trace.v1.trace_pb2 import Status

__all__ = ["Collector", "Received", "grpc_receiver", "http_receiver"]


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return [_value(v) for v in value.array_value.values]
    return getattr(value, kind) if kind else None


@dataclass
class Received:
    """One exported span, with its resource and scope."""

    name: str
    kind: int
    trace_id: str
    span_id: str
    parent_id: str
    attributes: dict[str, Any]
    status: Status
    scope: str
    resource: dict[str, Any]


@dataclass
class Collector:
    """What a receiver got; ``endpoint`` is what OTEL_EXPORTER_OTLP_ENDPOINT should say."""

    endpoint: str = ""
    spans: list[Received] = field(default_factory=list)

    def take(self, request: trace_service_pb2.ExportTraceServiceRequest) -> None:
        for resource_spans in request.resource_spans:
            resource = {kv.key: _value(kv.value) for kv in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for s in scope_spans.spans:
                    self.spans.append(
                        Received(
                            name=s.name,
                            kind=s.kind,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            attributes={kv.key: _value(kv.value) for kv in s.attributes},
                            status=s.status,
                            scope=scope_spans.scope.name,
                            resource=resource,
                        )
                    )

    def named(self, name: str) -> list[Received]:
        return [s for s in self.spans if s.name == name]

    def one(self, name: str) -> Received:
        (found,) = self.named(name)
        return found


class _TraceService(trace_service_pb2_grpc.TraceServiceServicer):  # type: ignore[misc]
    def __init__(self, collector: Collector) -> None:
        self._collector = collector

    async def Export(self, request: Any, context: Any) -> trace_service_pb2.ExportTraceServiceResponse:  # noqa: N802
        self._collector.take(request)
        return trace_service_pb2.ExportTraceServiceResponse()


@asynccontextmanager
async def grpc_receiver() -> AsyncIterator[Collector]:
    """An OTLP/gRPC receiver (the collector's TraceService) on a free loopback port."""
    collector = Collector()
    server = grpc.aio.server()
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_TraceService(collector), server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    collector.endpoint = f"http://127.0.0.1:{port}"
    try:
        yield collector
    finally:
        await server.stop(None)


@asynccontextmanager
async def http_receiver() -> AsyncIterator[Collector]:
    """An OTLP/HTTP receiver (``POST /v1/traces``, protobuf) on a free loopback port."""
    collector = Collector()

    async def export(request: web.Request) -> web.Response:
        collector.take(trace_service_pb2.ExportTraceServiceRequest.FromString(await request.read()))
        answer = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=answer, content_type="application/x-protobuf")

    app = web.Application()
    app.router.add_post("/v1/traces", export)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    collector.endpoint = f"http://127.0.0.1:{port}"
    try:
        yield collector
    finally:
        await runner.cleanup()
