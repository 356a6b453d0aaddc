"""What every ext_proc stream of one server shares, and what a stream needs from request control.

A :class:`~epp.extproc.stream.Stream` carries one request; the :class:`Processor` it is given holds
what all streams share (the pools' pipelines, the stream series, the options, the tracing). The
stream sees request control only through the two protocols here, :class:`Pipelines` and
:class:`RequestPipeline` (implemented by ``requestcontrol.pools.PoolPipelines`` and
``requestcontrol.pipeline.Pipeline``), so nothing in ``extproc`` imports the pipeline itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from epp.extproc.observe import StreamMetrics
from epp.extproc.usage import Usage
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.framework.response import ResponseTiming
from epp.requestcontrol.context import RequestContext
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.tracing import Tracing

__all__ = ["Pipelines", "Processor", "RequestPipeline", "StreamOptions"]


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Per-stream limits and switches (from ``ServeOptions``).

    ``max_response_buffer_bytes``: a non-SSE response is held whole to read its ``usage``; past
    this size it is passed through instead (and its usage goes unread), bounding memory.
    ``conformance_test_hooks``: echo the served endpoint the data plane reports in the response
    header ``x-conformance-test-served-endpoint`` (``served_endpoint.py``).
    """

    max_request_body_bytes: int = 16 * 1024 * 1024
    disable_subset_filter: bool = False
    chunk_size: int = 62_000
    max_response_buffer_bytes: int = 64 * 1024 * 1024
    conformance_test_hooks: bool = False

    def __post_init__(self) -> None:
        if self.max_request_body_bytes <= 0:
            raise ValueError(f"max_request_body_bytes must be > 0, got {self.max_request_body_bytes}")
        if not 0 < self.chunk_size <= 62_000:
            raise ValueError(f"chunk_size must be in 1..62000 (Envoy's per-message limit), got {self.chunk_size}")
        if self.max_response_buffer_bytes <= 0:
            raise ValueError(f"max_response_buffer_bytes must be > 0, got {self.max_response_buffer_bytes}")


class RequestPipeline(Protocol):
    """What one request needs from its pool's pipeline (``requestcontrol.pipeline.Pipeline``)."""

    def parse(self, request: InferenceRequest, raw: bytes, subset: frozenset[str] | None) -> RequestContext:
        """The request's context with its body read; EppError(BAD_REQUEST) when no parser takes it."""
        ...

    async def route(self, ctx: RequestContext) -> RoutingDecision:
        """Resolve target model, objective and priority, admit (possibly waiting in the flow-control queue)
        and schedule; raises EppError (429, 503, 404...). Cancelling it takes the request out of the queue."""
        ...

    def context(self, request: InferenceRequest, subset: frozenset[str] | None) -> RequestContext:
        """The context of a request without a body."""
        ...

    def route_headers_only(self, ctx: RequestContext) -> RoutingDecision:
        """Header-only request: a random endpoint; EppError(INTERNAL, 'no pods available in datastore') if none."""
        ...

    def response_complete(
        self, ctx: RequestContext, usage: Usage | None, status: int, timing: ResponseTiming | None = None
    ) -> Mapping[str, Mapping[str, float]]:
        """The response ended (before ``finished``): plugins read its usage and ``timing`` (when it went
        upstream, its first body byte, its end); returns their dynamic metadata."""
        ...

    def finished(self, ctx: RequestContext, *, completed: bool, status: int = 0, gateway_reply: bool = False) -> None:
        """Called exactly once per request that reached its pipeline, when the stream is over with it.

        ``ctx.decision`` is None when routing itself raised; ``completed`` is True only when the
        response was seen to its end; ``status`` is the response's HTTP status, 0 when no response
        headers came; ``gateway_reply``: Envoy made that answer itself (it could not reach the
        endpoint, or the connection was reset), the model server never answered.
        """
        ...


class Pipelines(Protocol):
    """The pipelines of every pool the picker serves (``requestcontrol.pools.PoolPipelines``)."""

    def pipeline_for(self, request: InferenceRequest) -> RequestPipeline:
        """The pipeline in force in the pool the request names; EppError (404, 400) when it names none we serve."""
        ...


class Processor:
    """What every stream of one server shares: the pools' pipelines, the metric recorder, the options, the tracing.

    ``tracing`` is None when requests are not traced (``--tracing=false``, or no exporter).
    """

    __slots__ = ("observe", "options", "pipelines", "tracing")

    def __init__(
        self, pipelines: Pipelines, metrics: EppMetrics, options: StreamOptions, tracing: Tracing | None = None
    ) -> None:
        self.pipelines = pipelines
        self.observe = StreamMetrics(metrics)
        self.options = options
        self.tracing = tracing
