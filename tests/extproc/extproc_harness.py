"""Test side of the ext_proc seam: a recording pool-pipeline double, message builders, a stream client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from epp.errors import EppError, ErrorCode
from epp.extproc import pb
from epp.extproc.server import ExtProcServer
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.parsing import ParserTable, request_path
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.framework.response import ResponseTiming, Usage
from epp.plugins.parsers import DEFAULT_PARSER_TYPES, parser_of_type
from epp.requestcontrol.context import RequestContext
from epp.requestcontrol.pools import PoolDispatcher
from epp.requestcontrol.recorder import ServingRecorder
from epp.telemetry.metrics import EppMetrics
from epp_sim.stack.extproc_client import (  # noqa: F401 - re-exported for the tests
    ExtProcCall,
    destination_metadata,
    post_headers,
    protocol,
    request_body,
    request_headers,
    response_body,
    response_headers,
    response_trailers,
    set_headers,
    streamed,
)

RECV_TIMEOUT = 5.0


def endpoint(address: str, port: int = 8000, name: str = "pod") -> EndpointState:
    return EndpointState(Endpoint(namespace="ns", name=f"{name}-rank-0", pod_name=name, address=address, port=port))


@dataclass
class FinishedCall:
    request: InferenceRequest
    decision: RoutingDecision | None
    completed: bool
    status: int = 0
    gateway_reply: bool = False


@dataclass
class RecordingPipeline:
    """The pool pipeline seam with the real parsers and the real model rewrite of the body, fixed targets
    (filtered by the subset IPs), an optional target model, priority or error; records every call."""

    targets: list[EndpointState] = field(default_factory=lambda: [endpoint("10.0.0.1")])
    target_model: str | None = None
    priority: int = 0
    error: BaseException | None = None
    routed: list[tuple[InferenceRequest, frozenset[str] | None]] = field(default_factory=list)
    headers_only: list[tuple[InferenceRequest, frozenset[str] | None]] = field(default_factory=list)
    finished_calls: list[FinishedCall] = field(default_factory=list)
    completed_responses: list[tuple[Usage | None, int]] = field(default_factory=list)
    timings: list[ResponseTiming | None] = field(default_factory=list)
    response_metadata: dict[str, dict[str, float]] = field(default_factory=dict)
    """What ``response_complete`` returns: the dynamic metadata for the response's last answer."""
    parsers: ParserTable = field(default_factory=lambda: ParserTable(parser_of_type(t) for t in DEFAULT_PARSER_TYPES))
    recorder: ServingRecorder = field(default_factory=lambda: ServingRecorder(EppMetrics(), "pool"))

    def pipeline_for(self, request: InferenceRequest) -> RecordingPipeline:
        return self

    def _decide(self, subset: frozenset[str] | None) -> RoutingDecision:
        if self.error is not None:
            raise self.error
        targets = [t for t in self.targets if subset is None or t.endpoint.address in subset]
        if not targets:
            raise EppError(ErrorCode.SERVICE_UNAVAILABLE, "failed to find endpoint candidates for serving the request")
        return RoutingDecision(targets)

    def context(self, request: InferenceRequest, subset: frozenset[str] | None) -> RequestContext:
        return RequestContext(request, subset, self.recorder)

    def parse(self, request: InferenceRequest, raw: bytes, subset: frozenset[str] | None) -> RequestContext:
        parser, api = self.parsers.resolve(request_path(request.headers))
        parsed = parser.parse(raw, api)
        parsed.apply_to(request, len(raw))
        ctx = self.context(request, subset)
        ctx.parsed, ctx.parser = parsed, parser
        return ctx

    async def route(self, ctx: RequestContext) -> RoutingDecision:
        request = ctx.request
        self.routed.append((request, ctx.subset))
        request.priority = self.priority
        if self.target_model is not None:
            request.target_model = self.target_model
            if ctx.parsed is not None and ctx.parser is not None and self.target_model != request.model:
                ctx.forward_body = ctx.parser.with_model(ctx.parsed, self.target_model)
        decision = ctx.decision = self._decide(ctx.subset)
        return decision

    def route_headers_only(self, ctx: RequestContext) -> RoutingDecision:
        self.headers_only.append((ctx.request, ctx.subset))
        if not self.targets:
            raise EppError(ErrorCode.INTERNAL, "no pods available in datastore")
        decision = ctx.decision = self._decide(ctx.subset)
        return decision

    def response_complete(
        self, ctx: RequestContext, usage: Usage | None, status: int, timing: ResponseTiming | None = None
    ) -> Mapping[str, Mapping[str, float]]:
        self.completed_responses.append((usage, status))
        self.timings.append(timing)
        return self.response_metadata

    def finished(self, ctx: RequestContext, *, completed: bool, status: int = 0, gateway_reply: bool = False) -> None:
        self.finished_calls.append(FinishedCall(ctx.request, ctx.decision, completed, status, gateway_reply))


@dataclass
class Running:
    server: ExtProcServer
    pipeline: RecordingPipeline
    metrics: EppMetrics
    grpc_port: int
    health_port: int
    channel: Any
    health_channel: Any

    @property
    def stub(self) -> Any:
        return pb.ExternalProcessorStub(self.channel)

    def open(self) -> ExtProcCall:
        return ExtProcCall(self.stub)

    def sample(self, name: str, **labels: str) -> float:
        value = self.metrics.registry.get_sample_value(name, labels)
        return 0.0 if value is None else value


Start = Callable[..., Awaitable[Running]]


class RecordingPools(PoolDispatcher[RecordingPipeline]):
    """Several pools' recording pipelines, chosen per request by the real pool dispatch."""

    __slots__ = ()

    def pipeline_for(self, request: InferenceRequest) -> RecordingPipeline:
        return self.pool_for(request)
