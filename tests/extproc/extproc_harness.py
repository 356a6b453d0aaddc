"""Test side of the ext_proc seam: a recording Director double, message builders, a stream client."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from epp.errors import EppError, ErrorCode
from epp.extproc import pb
from epp.extproc.server import ExtProcServer
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.parsing import ParserTable
from epp.framework.request import ApiKind, InferenceRequest, RoutingDecision
from epp.plugins.parsers import DEFAULT_PARSER_TYPES, ParserPlugin
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
class RecordingDirector:
    """Returns fixed targets (filtered by the subset IPs), optionally rewrites or raises; records calls."""

    targets: list[EndpointState] = field(default_factory=lambda: [endpoint("10.0.0.1")])
    target_model: str | None = None
    priority: int = 0
    error: BaseException | None = None
    routed: list[tuple[InferenceRequest, frozenset[str] | None]] = field(default_factory=list)
    headers_only: list[tuple[InferenceRequest, frozenset[str] | None]] = field(default_factory=list)
    finished_calls: list[FinishedCall] = field(default_factory=list)
    parsers: ParserTable = field(default_factory=lambda: ParserTable(ParserPlugin(t) for t in DEFAULT_PARSER_TYPES))

    def director_for(self, request: InferenceRequest) -> RecordingDirector:
        return self

    def _decide(self, subset: frozenset[str] | None) -> RoutingDecision:
        if self.error is not None:
            raise self.error
        targets = [t for t in self.targets if subset is None or t.endpoint.address in subset]
        if not targets:
            raise EppError(ErrorCode.SERVICE_UNAVAILABLE, "failed to find endpoint candidates for serving the request")
        return RoutingDecision(targets)

    def route(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        self.routed.append((request, subset))
        if self.target_model is not None:
            request.target_model = self.target_model
        request.priority = self.priority
        return self._decide(subset)

    def prepare(self, request: InferenceRequest) -> None:
        return None

    def route_headers_only(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        self.headers_only.append((request, subset))
        if not self.targets:
            raise EppError(ErrorCode.INTERNAL, "no pods available in datastore")
        return self._decide(subset)

    def api_for(self, path: str) -> ApiKind:
        return self.parsers.resolve(path)

    def finished(
        self,
        request: InferenceRequest,
        decision: RoutingDecision | None,
        *,
        completed: bool,
        status: int = 0,
        gateway_reply: bool = False,
    ) -> None:
        self.finished_calls.append(FinishedCall(request, decision, completed, status, gateway_reply))


@dataclass
class Running:
    server: ExtProcServer
    director: RecordingDirector
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
