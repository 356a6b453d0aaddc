"""Per-stream state machine for Envoy's ``ExternalProcessor/Process``: one HTTP request per stream.

Envoy opens one bidirectional stream per HTTP request and sends, in order, request headers, body
and trailers, then response headers, body and trailers. Two request-body modes are served:

- ``FULL_DUPLEX_STREAMED`` (the GIE mode): the request-headers answer is *held* until the body
  is complete, because the routing decision needs the body; then it is sent, followed by the
  body as ``StreamedBodyResponse`` chunks of at most 62,000 bytes, EoS on the last.
- ``BUFFERED``: Envoy waits for the headers answer before it sends the body, so headers are
  acknowledged at once and the routing mutation rides on the single request-body answer.

The mode is read from ``protocol_config`` on the stream's first message (Envoy sends it);
without it the GIE mode is assumed. A header-only request (``end_of_stream`` on the headers,
e.g. GET) is routed at the headers phase. The response half is a
:class:`~epp.extproc.response_relay.ResponseRelay`.

The stream moves through one :class:`Phase` at a time. It only *carries* the request: once the
body is complete, the pool's :class:`RequestPipeline` of that moment (:class:`Pipelines`; the
request's configuration snapshot) parses it into a
:class:`~epp.requestcontrol.context.RequestContext` and routes it; that pipeline is the one told
when the request is over. :meth:`Stream.handle` awaits the route (data producers, the flow-control
queue) in the stream's own task, never the loop's; the ``finally`` in ``run`` releases everything
however the stream ends (EoS, error, cancellation, which also takes a queued request out of the
queue).
"""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import AsyncIterable, Sequence
from time import perf_counter

from epp.errors import EppError, ErrorCode
from epp.extproc import pb
from epp.extproc.observe import RequestLabels
from epp.extproc.processor import Processor, RequestPipeline
from epp.extproc.replies import Replies
from epp.extproc.response_relay import ResponseRelay
from epp.extproc.responses import (
    add_dynamic_metadata,
    body_chunks,
    error_response,
    headers_ack,
    routing_body_response,
    routing_headers_response,
)
from epp.extproc.served_endpoint import served_endpoint_echo
from epp.extproc.subset_hint import subset_hint
from epp.framework import headers as wire
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.framework.response import ResponseTiming
from epp.requestcontrol.context import RequestContext
from epp.telemetry.logs import request_id_var
from epp.telemetry.tracing import RequestTrace, activated

__all__ = ["Phase", "Stream"]

log = logging.getLogger(__name__)

_FULL_DUPLEX = pb.BODY_FULL_DUPLEX_STREAMED
_BUFFERED = pb.BODY_BUFFERED
_MODEL_SERVER_ERROR = ErrorCode.MODEL_SERVER_ERROR.label


class Phase(enum.Enum):
    """Where a stream is; each inbound message is legal in some phases only."""

    OPEN = "open"  # nothing read yet (the first message may carry protocol_config)
    READING = "reading"  # request headers read, body being collected
    ROUTING = "routing"  # the body is read; producers, the flow-control queue or scheduling are deciding
    ROUTED = "routed"  # the destination was sent; the request is on its way upstream
    RESPONDING = "responding"  # response messages are being relayed
    DONE = "done"  # the response is complete (or the stream was rejected)


class Stream:
    """State of one ext_proc stream; dies with it."""

    __slots__ = (
        "_p",
        "_phase",
        "_request_mode",
        "_response_mode",
        "_request",
        "_pipeline",
        "_ctx",
        "_subset",
        "_body",
        "_body_size",
        "_t_start",
        "_t_routed",
        "_overhead",
        "_error_label",
        "_running",
        "_relay",
        "_trace",
    )

    def __init__(self, processor: Processor) -> None:
        self._p = processor
        self._phase = Phase.OPEN
        self._request_mode = _FULL_DUPLEX
        self._response_mode = _FULL_DUPLEX
        self._request: InferenceRequest | None = None
        self._pipeline: RequestPipeline | None = None  # owed a ``finished`` call while set
        self._ctx: RequestContext | None = None
        self._subset: frozenset[str] | None = None
        self._body: list[bytes] = []
        self._body_size = 0
        self._t_start = 0.0
        self._t_routed = 0.0  # when the routing answer was made: the request's t0 for latency learning
        self._overhead: tuple[float, float | None, float, float] | None = None  # observed once the answers are sent
        self._error_label = ""
        self._running: RequestLabels | None = None  # the labels the running gauge was raised under
        self._relay: ResponseRelay | None = None
        self._trace: RequestTrace | None = None  # the ``gateway.request`` span, ended in ``close``

    # -- driving -------------------------------------------------------------------------------

    async def run(self, requests: AsyncIterable[pb.ProcessingRequest], replies: Replies) -> None:
        """Answer every message of the stream; end the RPC once the exchange is complete. Always cleans up."""
        try:
            async for message in requests:
                try:
                    answers = await self.handle(message)
                except EppError as err:
                    if log.isEnabledFor(logging.DEBUG):
                        log.debug("request rejected", extra={"error": str(err)})
                    await self._reject(err, replies)
                    return
                except Exception:
                    log.exception("ext_proc stream failed; answering 500")
                    await self._reject(EppError(ErrorCode.INTERNAL, "internal error in the endpoint picker"), replies)
                    return
                done = self._phase is Phase.DONE
                for answer in answers[:-1] if done else answers:
                    await replies.send(answer)
                if done and answers:
                    await replies.send_last(answers[-1])
                if self._overhead is not None:
                    self._p.observe.overhead(*self._overhead)
                    self._overhead = None
                if done:
                    return  # the exchange is complete: end the RPC before the gateway resets it
        finally:
            self.close()

    async def _reject(self, err: EppError, replies: Replies) -> None:
        self._error_label = err.code.label
        self._phase = Phase.DONE
        if self._trace is not None:
            self._trace.fail(str(err))
        await replies.send_last(error_response(err))

    async def handle(self, message: pb.ProcessingRequest) -> Sequence[pb.ProcessingResponse]:
        """The answers to one inbound message (possibly none); raises EppError to end the stream."""
        if self._phase is Phase.OPEN and message.HasField("protocol_config"):
            self._request_mode = message.protocol_config.request_body_mode
            self._response_mode = message.protocol_config.response_body_mode
        kind = message.WhichOneof("request")
        if kind == "response_body":
            relay = self._start_response()
            return self._after_response_message(relay, relay.on_body(message.response_body))
        if kind == "request_body":
            return await self._on_request_body(message)
        if kind == "request_headers":
            return self._on_request_headers(message)
        if kind == "response_headers":
            relay = self._start_response()
            added = served_endpoint_echo(message) if self._p.options.conformance_test_hooks else None
            return self._after_response_message(relay, (relay.on_headers(message.response_headers, added),))
        if kind == "response_trailers":
            relay = self._start_response()
            return self._after_response_message(relay, relay.on_trailers())
        if kind == "request_trailers":
            return ()  # Upstream ignores request trailers and sends no answer.
        raise EppError(ErrorCode.INTERNAL, "malformed ProcessingRequest: no request or response phase is set")

    def close(self) -> None:
        """Stream end: release the running gauge, count the error, tell the pipeline once."""
        running, self._running = self._running, None
        if running is not None:
            self._p.observe.released(running)
        relay = self._relay
        label = _MODEL_SERVER_ERROR if relay is not None and relay.upstream_error else self._error_label
        if label:
            self._p.observe.error(running or self._labels(), label)
        trace, self._trace = self._trace, None
        if trace is not None:
            if relay is not None and relay.upstream_error:
                trace.fail(_MODEL_SERVER_ERROR)
            trace.end()
        self._phase = Phase.DONE
        self._finish(completed=False)

    # -- request path --------------------------------------------------------------------------

    def _on_request_headers(self, message: pb.ProcessingRequest) -> Sequence[pb.ProcessingResponse]:
        if self._phase is not Phase.OPEN:
            raise EppError(ErrorCode.INTERNAL, "ext_proc protocol error: request headers received twice")
        self._t_start = perf_counter()
        self._read_subset(message)
        headers: dict[str, str] = {}
        http_headers = message.request_headers
        for header in http_headers.headers.headers:
            raw = header.raw_value
            headers[header.key.lower()] = raw.decode("utf-8", "surrogateescape") if raw else header.value
        request = self._new_request(headers)
        tracing = self._p.tracing
        if tracing is not None:  # continues the client's trace; the forwarded request carries our span
            self._trace = tracing.start_request(headers, request.upstream_headers)
        if http_headers.end_of_stream:
            return self._route_headers_only(request)
        if self._request_mode == _BUFFERED:
            return (headers_ack(),)
        if self._request_mode != _FULL_DUPLEX:
            mode = pb.ProcessingMode.BodySendMode.Name(self._request_mode)
            raise EppError(
                ErrorCode.INTERNAL,
                f"unsupported ext_proc request_body_mode {mode}: configure FULL_DUPLEX_STREAMED or BUFFERED",
            )
        return ()

    def _new_request(self, headers: dict[str, str]) -> InferenceRequest:
        request_id = headers.get(wire.REQUEST_ID)
        upstream: dict[str, str] = {}
        if not request_id:
            request_id = upstream[wire.REQUEST_ID] = str(uuid.uuid4())
        request_id_var.set(request_id)
        self._phase = Phase.READING
        self._request = InferenceRequest(request_id=request_id, headers=headers, upstream_headers=upstream)
        return self._request

    def _read_subset(self, message: pb.ProcessingRequest) -> None:
        if not self._p.options.disable_subset_filter:
            hint = subset_hint(message)
            if hint is not None:
                self._subset = hint

    async def _on_request_body(self, message: pb.ProcessingRequest) -> Sequence[pb.ProcessingResponse]:
        if self._phase is Phase.OPEN:  # A body without headers: tolerated, routed with no client headers.
            self._t_start = perf_counter()
            self._new_request({})
        elif self._phase is not Phase.READING:
            raise EppError(ErrorCode.INTERNAL, "ext_proc protocol error: request body after the request was routed")
        body = message.request_body
        chunk = body.body
        if chunk:
            size = self._body_size + len(chunk)
            limit = self._p.options.max_request_body_bytes
            if size > limit:
                self._body.clear()
                raise EppError(ErrorCode.PAYLOAD_TOO_LARGE, f"request body exceeds the limit of {limit} bytes")
            self._body.append(chunk)
            self._body_size = size
        self._read_subset(message)
        if not body.end_of_stream:
            return ()
        t_last = perf_counter()
        chunks, self._body = self._body, []
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return await self._route_body(raw, t_last)

    def _route_headers_only(self, request: InferenceRequest) -> Sequence[pb.ProcessingResponse]:
        t_last = self._t_start
        pipeline = self._owe(self._p.pipelines.pipeline_for(request))
        ctx = self._ctx = pipeline.context(request, self._subset)
        with activated(self._trace):
            decision = self._routed(pipeline.route_headers_only(ctx))
        t_scheduled = self._t_routed = perf_counter()
        answer = routing_headers_response(request.upstream_headers, decision.destination, 0)
        self._overhead = (t_last, None, t_scheduled, perf_counter())
        return (answer,)

    async def _route_body(self, raw: bytes, t_last: float) -> Sequence[pb.ProcessingResponse]:
        request = self._request
        assert request is not None
        pipeline = self._p.pipelines.pipeline_for(request)
        ctx = pipeline.parse(request, raw, self._subset)
        self._ctx = ctx
        self._owe(pipeline)
        t_parsed = perf_counter()
        with activated(self._trace):
            decision = self._routed(await pipeline.route(ctx))
        t_scheduled = self._t_routed = perf_counter()
        forward = ctx.forward_body
        body = raw if forward is None else forward
        destination = decision.destination
        upstream_headers = request.upstream_headers
        if decision.upstream_headers:
            upstream_headers = {**upstream_headers, **decision.upstream_headers}
        answers: list[pb.ProcessingResponse]
        scores, removed = decision.endpoint_scores, decision.cleared_headers
        if self._request_mode == _BUFFERED:
            answers = [
                routing_body_response(upstream_headers, destination, len(body), forward, scores=scores, removed=removed)
            ]
        else:
            answers = [
                routing_headers_response(upstream_headers, destination, len(body), scores=scores, removed=removed)
            ]
            answers += body_chunks(body, self._p.options.chunk_size, request=True, end_of_stream=True)
        labels = self._running = self._labels()
        self._p.observe.routed(labels, len(body))
        if log.isEnabledFor(logging.DEBUG):
            log.debug(
                "request routed", extra={"destination": destination, "model": labels[0], "target_model": labels[1]}
            )
        self._overhead = (t_last, t_parsed, t_scheduled, perf_counter())
        return answers

    def _owe(self, pipeline: RequestPipeline) -> RequestPipeline:
        """From here on ``pipeline`` is owed ``finished``; the phase says a decision is being made."""
        self._pipeline = pipeline
        self._phase = Phase.ROUTING
        return pipeline

    def _routed(self, decision: RoutingDecision) -> RoutingDecision:
        if not decision.targets:
            raise EppError(ErrorCode.INTERNAL, "the pipeline returned a routing decision without endpoints")
        self._phase = Phase.ROUTED
        return decision

    # -- response path -------------------------------------------------------------------------

    def _start_response(self) -> ResponseRelay:
        """The relay, made at the first response message (headers, or a body without headers)."""
        relay = self._relay
        if relay is not None:
            return relay
        request = self._request
        ctx = self._ctx
        rename: tuple[str, str] | None = None
        if ctx is not None and ctx.forward_body is not None and request is not None:
            rename = (request.target_model, request.model)
        decision = ctx.decision if ctx is not None else None
        options = self._p.options
        relay = self._relay = ResponseRelay(
            mode=self._response_mode,
            chunk_size=options.chunk_size,
            max_buffer=options.max_response_buffer_bytes,
            sse=request is not None and request.stream,
            read_body=ctx is None or ctx.parsed is None or ctx.parsed.reads_response,
            rename=rename,
            extra_headers=decision.response_headers if decision is not None else None,
        )
        self._phase = Phase.RESPONDING
        return relay

    def _after_response_message(
        self, relay: ResponseRelay, answers: Sequence[pb.ProcessingResponse]
    ) -> Sequence[pb.ProcessingResponse]:
        """Once the relay has seen the whole response: record it and tell the pipeline (once)."""
        if relay.done and self._phase is Phase.RESPONDING:
            self._phase = Phase.DONE
            labels = self._running or self._labels()
            duration = perf_counter() - self._t_start if self._t_start else 0.0
            self._p.observe.response_complete(labels, relay.size, duration, relay.usage)
            self._tell_response(relay, answers)
            self._finish(completed=True)
        return answers

    def _tell_response(self, relay: ResponseRelay, answers: Sequence[pb.ProcessingResponse]) -> None:
        """The response plugins' dynamic metadata rides on the response's last answer."""
        pipeline, ctx = self._pipeline, self._ctx
        if pipeline is not None and ctx is not None:
            timing = ResponseTiming(self._t_routed, relay.first_byte_at, perf_counter()) if self._t_routed else None
            metadata = pipeline.response_complete(ctx, relay.usage, relay.status, timing)  # plugin errors caught there
            if metadata and answers:
                add_dynamic_metadata(answers[-1], metadata)

    # -- shared --------------------------------------------------------------------------------

    def _labels(self) -> RequestLabels:
        return self._p.observe.labels_of(self._request)

    def _finish(self, *, completed: bool) -> None:
        pipeline, self._pipeline = self._pipeline, None
        ctx = self._ctx
        if pipeline is None or ctx is None:
            return
        try:
            relay = self._relay
            if relay is None:
                pipeline.finished(ctx, completed=completed)
            else:
                pipeline.finished(ctx, completed=completed, status=relay.status, gateway_reply=not relay.from_upstream)
        except Exception:
            log.exception("pipeline.finished failed")
