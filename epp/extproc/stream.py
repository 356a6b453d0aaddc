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
e.g. GET) is routed at the headers phase. The response side answers headers at once, passes SSE
chunks through one by one, and buffers plain JSON to read ``usage`` and restore the client's
model name.

Handling is synchronous (:meth:`Stream.handle` returns the answers to write); only
:meth:`Stream.run` awaits, so a stream's state can never be observed half-updated, and the
``finally`` in ``run`` releases everything however the stream ends (EoS, error, cancellation).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from time import perf_counter
from typing import Protocol

from epp.errors import EppError, ErrorCode
from epp.extproc import pb
from epp.extproc.observe import StreamMetrics
from epp.extproc.request_body import parse_request_body, serialize_go
from epp.extproc.responses import (
    SYSTEM_OWNED_HEADERS,
    body_chunk,
    body_chunks,
    error_response,
    headers_ack,
    response_body_replaced,
    response_headers_response,
    response_trailers_response,
    routing_body_response,
    routing_headers_response,
)
from epp.extproc.usage import SseUsageScanner, Usage, usage_from_json
from epp.framework.request import ApiKind, InferenceRequest, RoutingDecision
from epp.telemetry.metrics import EppMetrics

__all__ = ["REQUEST_ID", "Director", "Processor", "Stream", "StreamOptions", "subset_ips"]

log = logging.getLogger(__name__)

REQUEST_ID: ContextVar[str] = ContextVar("epp_request_id", default="")
"""The current stream's ``x-request-id``, for log records (set once the headers are read)."""

_REQUEST_ID_HEADER = "x-request-id"
_OBJECTIVE_HEADER = "x-gateway-inference-objective"
_MODEL_REWRITE_HEADER = "x-gateway-model-name-rewrite"
_SUBSET_NAMESPACE = "envoy.lb.subset_hint"
_SUBSET_KEY = "x-gateway-destination-endpoint-subset"
_FULL_DUPLEX = pb.BODY_FULL_DUPLEX_STREAMED
_BUFFERED = pb.BODY_BUFFERED
_BODY_NONE = pb.BODY_NONE
_MODEL_SERVER_ERROR = ErrorCode.MODEL_SERVER_ERROR.label

Write = Callable[[pb.ProcessingResponse], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """Per-stream limits and switches (from ``ServeOptions``).

    ``max_response_buffer_bytes``: a non-SSE response is held whole to read its ``usage``; past
    this size it is passed through instead (and its usage goes unread), bounding memory.
    """

    max_request_body_bytes: int = 16 * 1024 * 1024
    disable_subset_filter: bool = False
    chunk_size: int = 62_000
    max_response_buffer_bytes: int = 64 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_request_body_bytes <= 0:
            raise ValueError(f"max_request_body_bytes must be > 0, got {self.max_request_body_bytes}")
        if not 0 < self.chunk_size <= 62_000:
            raise ValueError(f"chunk_size must be in 1..62000 (Envoy's per-message limit), got {self.chunk_size}")
        if self.max_response_buffer_bytes <= 0:
            raise ValueError(f"max_response_buffer_bytes must be > 0, got {self.max_response_buffer_bytes}")


class Director(Protocol):
    """What a stream needs from the request-control layer (implemented in ``requestcontrol``)."""

    def route(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        """Resolve target model and priority (mutates request.target_model / request.priority),
        run admission and scheduling. Raises EppError (429, 503, 404...)."""
        ...

    def route_headers_only(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        """Header-only request: a random endpoint; EppError(INTERNAL, 'no pods available in datastore') if none."""
        ...

    def finished(self, request: InferenceRequest, decision: RoutingDecision | None, *, completed: bool) -> None:
        """Called exactly once per stream that reached routing: response complete or stream ended early.

        ``decision`` is None when routing itself raised; ``completed`` is True only when the
        response was seen to its end.
        """
        ...


def _ip_of(hostport: str) -> str:
    if hostport.startswith("["):
        end = hostport.find("]")
        return hostport[1:end] if end > 0 else hostport[1:]
    if hostport.count(":") != 1:
        return hostport  # A bare IPv4 or IPv6 address: no port to strip.
    return hostport.rpartition(":")[0]


def subset_ips(items: Iterable[str]) -> frozenset[str]:
    """The IPs of an Envoy subset hint (``ip:port`` / ``[v6]:port``): port stripped, brackets removed."""
    return frozenset(_ip_of(item) for item in items)


class Processor:
    """What every stream of one server shares: the director, the metric recorder and the options."""

    __slots__ = ("director", "observe", "options")

    def __init__(self, director: Director, metrics: EppMetrics, options: StreamOptions) -> None:
        self.director = director
        self.observe = StreamMetrics(metrics)
        self.options = options


class Stream:
    """State of one ext_proc stream; dies with it."""

    __slots__ = (
        "_p",
        "_first",
        "_request_mode",
        "_response_mode",
        "_request",
        "_decision",
        "_subset",
        "_chunks",
        "_body_size",
        "_t_start",
        "_overhead",
        "_reached_routing",
        "_finished",
        "_running",
        "_error_label",
        "_response_started",
        "_response_done",
        "_upstream_error",
        "_pass_through",
        "_scanner",
        "_response_chunks",
        "_response_size",
        "_rewrite",
    )

    def __init__(self, processor: Processor) -> None:
        self._p = processor
        self._first = True
        self._request_mode = _FULL_DUPLEX
        self._response_mode = _FULL_DUPLEX
        self._request: InferenceRequest | None = None
        self._decision: RoutingDecision | None = None
        self._subset: frozenset[str] | None = None
        self._chunks: list[bytes] = []
        self._body_size = 0
        self._t_start = 0.0
        self._overhead: tuple[float, float | None, float, float] | None = None
        self._reached_routing = False
        self._finished = False
        self._running = False
        self._error_label = ""
        self._response_started = False
        self._response_done = False
        self._upstream_error = False
        self._pass_through = False
        self._scanner: SseUsageScanner | None = None
        self._response_chunks: list[bytes] = []
        self._response_size = 0
        self._rewrite: tuple[tuple[bytes, bytes], ...] = ()

    # -- driving -------------------------------------------------------------------------------

    async def run(self, requests: AsyncIterable[pb.ProcessingRequest], write: Write) -> None:
        """Answer every message of the stream; end it after an ImmediateResponse. Always cleans up."""
        try:
            async for message in requests:
                try:
                    answers = self.handle(message)
                except EppError as err:
                    if log.isEnabledFor(logging.DEBUG):
                        log.debug("request rejected", extra={"error": str(err)})
                    await self._reject(err, write)
                    return
                except Exception:
                    log.exception("ext_proc stream failed; answering 500")
                    await self._reject(EppError(ErrorCode.INTERNAL, "internal error in the endpoint picker"), write)
                    return
                for answer in answers:
                    await write(answer)
                if self._overhead is not None:
                    self._p.observe.overhead(*self._overhead)
                    self._overhead = None
        finally:
            self.close()

    async def _reject(self, err: EppError, write: Write) -> None:
        self._error_label = err.code.label
        await write(error_response(err))

    def handle(self, message: pb.ProcessingRequest) -> Sequence[pb.ProcessingResponse]:
        """The answers to one inbound message (possibly none); raises EppError to end the stream."""
        if self._first:
            self._first = False
            if message.HasField("protocol_config"):
                self._request_mode = message.protocol_config.request_body_mode
                self._response_mode = message.protocol_config.response_body_mode
        kind = message.WhichOneof("request")
        if kind == "response_body":
            return self._on_response_body(message.response_body)
        if kind == "request_body":
            return self._on_request_body(message)
        if kind == "request_headers":
            return self._on_request_headers(message)
        if kind == "response_headers":
            return self._on_response_headers(message.response_headers)
        if kind == "response_trailers":
            return self._on_response_trailers()
        if kind == "request_trailers":
            return ()  # Upstream ignores request trailers and sends no answer.
        raise EppError(ErrorCode.INTERNAL, "malformed ProcessingRequest: no request or response phase is set")

    def close(self) -> None:
        """Stream end: release the running gauge, count the error, tell the director once."""
        model, target = self._labels()
        if self._running:
            self._running = False
            self._p.observe.released(model, target)
        label = _MODEL_SERVER_ERROR if self._upstream_error else self._error_label
        if label:
            self._p.observe.error(model, target, label)
        self._finish(completed=False)

    # -- request path --------------------------------------------------------------------------

    def _on_request_headers(self, message: pb.ProcessingRequest) -> Sequence[pb.ProcessingResponse]:
        if self._request is not None:
            raise EppError(ErrorCode.INTERNAL, "ext_proc protocol error: request headers received twice")
        self._t_start = perf_counter()
        self._read_subset(message)
        headers: dict[str, str] = {}
        http_headers = message.request_headers
        for header in http_headers.headers.headers:
            raw = header.raw_value
            headers[header.key.lower()] = raw.decode("utf-8", "surrogateescape") if raw else header.value
        request = self._new_request(headers)
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
        request_id = headers.get(_REQUEST_ID_HEADER)
        if not request_id:
            request_id = headers[_REQUEST_ID_HEADER] = str(uuid.uuid4())
        REQUEST_ID.set(request_id)
        self._request = InferenceRequest(
            request_id=request_id,
            objective=headers.get(_OBJECTIVE_HEADER, ""),
            target_model=headers.get(_MODEL_REWRITE_HEADER, ""),
            headers=headers,
        )
        return self._request

    def _read_subset(self, message: pb.ProcessingRequest) -> None:
        if self._p.options.disable_subset_filter or not message.HasField("metadata_context"):
            return
        namespaces = message.metadata_context.filter_metadata
        if _SUBSET_NAMESPACE not in namespaces:
            return
        fields = namespaces[_SUBSET_NAMESPACE].fields
        if _SUBSET_KEY not in fields:
            return
        value = fields[_SUBSET_KEY]
        if value.WhichOneof("kind") != "list_value":
            return
        items = value.list_value.values
        self._subset = subset_ips(v.string_value for v in items if v.WhichOneof("kind") == "string_value")

    def _on_request_body(self, message: pb.ProcessingRequest) -> Sequence[pb.ProcessingResponse]:
        if self._reached_routing:
            raise EppError(ErrorCode.INTERNAL, "ext_proc protocol error: request body after the request was routed")
        if self._request is None:  # A body without headers: tolerated, routed with no client headers.
            self._t_start = perf_counter()
            self._new_request({})
        body = message.request_body
        chunk = body.body
        if chunk:
            size = self._body_size + len(chunk)
            limit = self._p.options.max_request_body_bytes
            if size > limit:
                self._chunks.clear()
                raise EppError(ErrorCode.PAYLOAD_TOO_LARGE, f"request body exceeds the limit of {limit} bytes")
            self._chunks.append(chunk)
            self._body_size = size
        self._read_subset(message)
        if not body.end_of_stream:
            return ()
        t_last = perf_counter()
        chunks, self._chunks = self._chunks, []
        raw = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        return self._route_body(raw, t_last)

    def _route(self, route: Callable[[InferenceRequest, frozenset[str] | None], RoutingDecision]) -> RoutingDecision:
        request = self._request
        assert request is not None
        self._reached_routing = True
        decision = route(request, self._subset)
        if not decision.targets:
            raise EppError(ErrorCode.INTERNAL, "director returned a routing decision without endpoints")
        self._decision = decision
        return decision

    def _route_headers_only(self, request: InferenceRequest) -> Sequence[pb.ProcessingResponse]:
        t_last = self._t_start
        request.api = ApiKind.NONE
        decision = self._route(self._p.director.route_headers_only)
        t_scheduled = perf_counter()
        answer = routing_headers_response(request.headers, decision.destination, 0)
        self._overhead = (t_last, None, t_scheduled, perf_counter())
        return (answer,)

    def _route_body(self, raw: bytes, t_last: float) -> Sequence[pb.ProcessingResponse]:
        request = self._request
        assert request is not None
        parsed = parse_request_body(raw, request.headers)
        request.body = parsed.body
        request.model = parsed.model
        request.api = parsed.api
        request.stream = parsed.stream
        request.size = len(raw)
        if not request.target_model:
            request.target_model = parsed.model
        t_parsed = perf_counter()
        decision = self._route(self._p.director.route)
        t_scheduled = perf_counter()
        target_model = request.target_model
        rewritten: bytes | None = None
        if target_model and target_model != request.model:
            parsed.body["model"] = target_model
            rewritten = serialize_go(parsed.body)
        body = raw if rewritten is None else rewritten
        destination = decision.destination
        answers: list[pb.ProcessingResponse]
        if self._request_mode == _BUFFERED:
            answers = [routing_body_response(request.headers, destination, len(body), rewritten)]
        else:
            answers = [routing_headers_response(request.headers, destination, len(body))]
            answers += body_chunks(body, self._p.options.chunk_size, request=True, end_of_stream=True)
        self._overhead = (t_last, t_parsed, t_scheduled, perf_counter())
        model, target = self._labels()
        self._p.observe.routed(model, target, request.priority, len(body))
        self._running = True
        if log.isEnabledFor(logging.DEBUG):
            log.debug("request routed", extra={"destination": destination, "model": model, "target_model": target})
        return answers

    # -- response path -------------------------------------------------------------------------

    def _on_response_headers(self, http_headers: pb.HttpHeaders) -> Sequence[pb.ProcessingResponse]:
        self._start_response()
        echo: list[tuple[str, bytes]] = []
        for header in http_headers.headers.headers:
            key = header.key
            raw = header.raw_value or header.value.encode()
            lower = key.lower()
            if lower in SYSTEM_OWNED_HEADERS:
                continue
            echo.append((key, raw))
            if lower == ":status" or lower == "status":
                self._upstream_error = raw.strip() != b"200"
            elif lower == "content-type" and b"text/event-stream" in raw:
                self._stream_sse()
        if self._decision is not None and self._decision.response_headers:
            # What the picker hands the client (e.g. the session-affinity token) wins over upstream.
            extra = self._decision.response_headers
            echo = [(k, v) for k, v in echo if k.lower() not in extra]
            echo.extend((k, v.encode()) for k, v in extra.items())
        answer = response_headers_response(echo, remove_content_length=bool(self._rewrite))
        if http_headers.end_of_stream or self._response_mode == _BODY_NONE:
            self._complete_response(None)  # No body follows, or Envoy will not send it to us.
        return (answer,)

    def _start_response(self) -> None:
        """First response message (headers, or a body without headers): fix SSE and the model rewrite."""
        if self._response_started:
            return
        self._response_started = True
        request = self._request
        if request is None:
            return  # Response without a request phase: nothing to rewrite, labels stay empty.
        if request.stream:
            self._stream_sse()
        incoming, target = request.model, request.target_model
        if incoming and target and incoming != target and self._response_mode != _BODY_NONE:
            old = json.dumps(target, ensure_ascii=False).encode()
            new = json.dumps(incoming, ensure_ascii=False).encode()
            self._rewrite = ((b'"model":' + old, b'"model":' + new), (b'"model": ' + old, b'"model": ' + new))

    def _stream_sse(self) -> None:
        """An SSE response: pass every chunk through at once, reading usage as it goes by."""
        self._pass_through = True
        if self._scanner is None:
            self._scanner = SseUsageScanner()

    def _rewrite_back(self, data: bytes) -> bytes:
        """The target model name replaced by the client's (compact spelling first, then spaced)."""
        for needle, replacement in self._rewrite:
            if needle in data:
                return data.replace(needle, replacement)
        return data

    def _on_response_body(self, body: pb.HttpBody) -> Sequence[pb.ProcessingResponse]:
        self._start_response()
        chunk: bytes = body.body
        end = body.end_of_stream
        self._response_size += len(chunk)
        full_duplex = self._response_mode == _FULL_DUPLEX
        if self._pass_through:
            scanner = self._scanner
            if scanner is not None:
                scanner.feed(chunk)
            if end:
                if scanner is not None:
                    scanner.finish()
                self._complete_response(scanner.usage if scanner is not None else None)
            out = self._rewrite_back(chunk) if self._rewrite else chunk
            if full_duplex:
                return (body_chunk(out, request=False, end_of_stream=end),)
            return (response_body_replaced(None if out is chunk else out),)
        if chunk:
            self._response_chunks.append(chunk)
        if full_duplex:
            if not end:
                if self._response_size <= self._p.options.max_response_buffer_bytes:
                    return ()
                # Too large to hold for its usage: hand over what we have, pass the rest through.
                self._pass_through = True
                whole = self._take_response_body()
                out = self._rewrite_back(whole) if self._rewrite else whole
                return body_chunks(out, self._p.options.chunk_size, request=False, end_of_stream=False)
            whole = self._take_response_body()
            self._complete_response(usage_from_json(whole))
            out = self._rewrite_back(whole) if self._rewrite else whole
            return body_chunks(out, self._p.options.chunk_size, request=False, end_of_stream=True)
        # Envoy buffers (BUFFERED/STREAMED): answer each message now; read usage at the end.
        if end:
            self._complete_response(usage_from_json(self._take_response_body()))
        out = self._rewrite_back(chunk) if self._rewrite else chunk
        return (response_body_replaced(None if out is chunk else out),)

    def _take_response_body(self) -> bytes:
        chunks, self._response_chunks = self._response_chunks, []
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _on_response_trailers(self) -> Sequence[pb.ProcessingResponse]:
        """Trailers end the response: flush what is buffered (without EoS), then answer them."""
        self._start_response()
        answers: list[pb.ProcessingResponse] = []
        usage: Usage | None = None
        if self._scanner is not None:
            self._scanner.finish()
            usage = self._scanner.usage
        elif self._response_chunks:
            whole = self._take_response_body()
            usage = usage_from_json(whole)
            if self._response_mode == _FULL_DUPLEX:
                out = self._rewrite_back(whole) if self._rewrite else whole
                answers += body_chunks(out, self._p.options.chunk_size, request=False, end_of_stream=False)
        self._complete_response(usage)
        answers.append(response_trailers_response())
        return answers

    def _complete_response(self, usage: Usage | None) -> None:
        if self._response_done:
            return
        self._response_done = True
        model, target = self._labels()
        duration = perf_counter() - self._t_start if self._t_start else 0.0
        self._p.observe.response_complete(model, target, self._response_size, duration, usage)
        self._finish(completed=True)

    # -- shared --------------------------------------------------------------------------------

    def _labels(self) -> tuple[str, str]:
        request = self._request
        if request is None:
            return "", ""
        return request.model, request.target_model or request.model

    def _finish(self, *, completed: bool) -> None:
        if not self._reached_routing or self._finished:
            return
        self._finished = True
        request = self._request
        assert request is not None
        try:
            self._p.director.finished(request, self._decision, completed=completed)
        except Exception:
            log.exception("director.finished failed")
