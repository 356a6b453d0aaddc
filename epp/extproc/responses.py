"""Builders for every ProcessingResponse the picker sends: routing, bodies, headers, errors.

Messages are filled in place (``msg.a.b.c = x``, ``repeated.add()``): with upb that is ~3× faster
than composing them from constructors, and this runs once or more per request. The routing
decision travels twice, as the ``x-gateway-destination-endpoint`` header and as the
``envoy.lb`` dynamic-metadata value of the same key; Envoy's ORIGINAL_DST cluster reads either.

Header mutations carry only what changes. Upstream's picker echoes every request and response
header back unchanged, which changes nothing for the client (Envoy refuses the pseudo-headers,
``host`` and ``x-envoy-*`` anyway, counting each refusal) and costs a header option per header
on both sides of the stream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from epp.errors import EppError
from epp.extproc import pb
from epp.framework.headers import (
    DESTINATION_ENDPOINT,
    DESTINATION_ENDPOINT_SCORES,
    LB_METADATA_NAMESPACE,
    WENT_INTO_RESP_HEADERS,
)

__all__ = [
    "body_chunk",
    "body_chunks",
    "error_response",
    "headers_ack",
    "response_body_replaced",
    "response_headers_response",
    "response_trailers_response",
    "routing_body_response",
    "routing_headers_response",
]

_OVERWRITE = pb.OVERWRITE_IF_EXISTS_OR_ADD


def _set_header(set_headers: Any, key: str, raw: bytes) -> None:
    # Explicit overwrite: the echo must replace each header, never add a duplicate.
    option = set_headers.add()
    option.header.key = key
    option.header.raw_value = raw
    option.append_action = _OVERWRITE


def _fill_routing(
    common: Any, headers: Mapping[str, str], destination: str, body_length: int, removed: Iterable[str]
) -> None:
    common.clear_route_cache = True
    mutation = common.header_mutation
    set_headers = mutation.set_headers
    _set_header(set_headers, DESTINATION_ENDPOINT, destination.encode())
    if body_length > 0:
        _set_header(set_headers, "Content-Length", str(body_length).encode())
    for key, value in headers.items():
        _set_header(set_headers, key, value.encode("utf-8", "surrogateescape"))
    mutation.remove_headers.extend(removed)


def _fill_metadata(response: pb.ProcessingResponse, destination: str, scores: Mapping[str, float] | None) -> None:
    namespace = response.dynamic_metadata.fields[LB_METADATA_NAMESPACE].struct_value
    namespace.fields[DESTINATION_ENDPOINT].string_value = destination
    if scores:  # upstream's --emit-endpoint-scores: a struct of ip:port → number, beside the destination
        fields = namespace.fields[DESTINATION_ENDPOINT_SCORES].struct_value.fields
        for hostport, score in scores.items():
            fields[hostport].number_value = score


def add_dynamic_metadata(response: pb.ProcessingResponse, metadata: Mapping[str, Mapping[str, float]]) -> None:
    """Put plugins' numbers (namespace → key → value) into ``response``'s dynamic metadata, beside what it has."""
    for namespace, values in metadata.items():
        fields = response.dynamic_metadata.fields[namespace].struct_value.fields
        for key, value in values.items():
            fields[key].number_value = value


def routing_headers_response(
    headers: Mapping[str, str],
    destination: str,
    body_length: int,
    *,
    scores: Mapping[str, float] | None = None,
    removed: Iterable[str] = (),
) -> pb.ProcessingResponse:
    """The request-headers answer that routes (FULL_DUPLEX_STREAMED, and header-only requests).

    Sets the destination, the body's ``Content-Length`` when it is non-empty and ``headers``
    (what the picker adds to the forwarded request: a request id it made up, the trace context,
    where to prefill), removes the client's headers in ``removed`` (ones the picker owns), clears
    the route cache and carries the ``envoy.lb`` metadata (with the endpoints' ``scores``, when given).
    """
    response = pb.ProcessingResponse()
    _fill_routing(response.request_headers.response, headers, destination, body_length, removed)
    _fill_metadata(response, destination, scores)
    return response


def routing_body_response(
    headers: Mapping[str, str],
    destination: str,
    body_length: int,
    body: bytes | None,
    *,
    scores: Mapping[str, float] | None = None,
    removed: Iterable[str] = (),
) -> pb.ProcessingResponse:
    """The request-body answer that routes in BUFFERED mode; ``body`` only when it was rewritten."""
    response = pb.ProcessingResponse()
    common = response.request_body.response
    _fill_routing(common, headers, destination, body_length, removed)
    if body is not None:
        common.body_mutation.body = body
    _fill_metadata(response, destination, scores)
    return response


def headers_ack() -> pb.ProcessingResponse:
    """The BUFFERED-mode request-headers answer: no mutation yet (routing rides on the body answer)."""
    response = pb.ProcessingResponse()
    response.request_headers.response.clear_route_cache = True
    return response


def body_chunk(chunk: bytes, *, request: bool, end_of_stream: bool) -> pb.ProcessingResponse:
    """One FULL_DUPLEX_STREAMED body message (``chunk`` must fit the 62,000-byte limit)."""
    response = pb.ProcessingResponse()
    body = response.request_body if request else response.response_body
    streamed = body.response.body_mutation.streamed_response
    streamed.body = chunk
    streamed.end_of_stream = end_of_stream
    return response


def body_chunks(body: bytes, chunk_size: int, *, request: bool, end_of_stream: bool) -> list[pb.ProcessingResponse]:
    """``body`` as streamed messages of at most ``chunk_size`` bytes; EoS only on the last.

    An empty body still yields one (empty) message, so the phase is always answered.
    """
    if len(body) <= chunk_size:
        return [body_chunk(body, request=request, end_of_stream=end_of_stream)]
    last = len(body) - chunk_size
    return [
        body_chunk(body[i : i + chunk_size], request=request, end_of_stream=end_of_stream and i >= last)
        for i in range(0, len(body), chunk_size)
    ]


def response_body_replaced(body: bytes | None) -> pb.ProcessingResponse:
    """A response-body answer outside FULL_DUPLEX_STREAMED: replace the body, or leave it (None)."""
    response = pb.ProcessingResponse()
    common = response.response_body.response
    if body is not None:
        common.body_mutation.body = body
    else:
        common.SetInParent()
    return response


def response_headers_response(
    headers: Iterable[tuple[str, bytes]], *, remove_content_length: bool
) -> pb.ProcessingResponse:
    """The response-headers answer: upstream's marker plus the picker's own response ``headers``.

    ``remove_content_length`` when the body will be rewritten (model name back to the client's):
    the upstream length would then be wrong.
    """
    response = pb.ProcessingResponse()
    mutation = response.response_headers.response.header_mutation
    set_headers = mutation.set_headers
    _set_header(set_headers, WENT_INTO_RESP_HEADERS, b"true")
    for key, raw in headers:
        _set_header(set_headers, key, raw)
    if remove_content_length:
        mutation.remove_headers.append("content-length")
    return response


def response_trailers_response() -> pb.ProcessingResponse:
    """An empty response-trailers answer (no mutation)."""
    response = pb.ProcessingResponse()
    response.response_trailers.SetInParent()
    return response


def error_response(err: EppError) -> pb.ProcessingResponse:
    """The ImmediateResponse for ``err``: its HTTP status, body ``inference error: <Code> - <Msg>``."""
    response = pb.ProcessingResponse()
    immediate = response.immediate_response
    immediate.status.code = err.code.http_status
    immediate.body = str(err).encode()
    if err.headers:
        set_headers = immediate.headers.set_headers
        for key, value in err.headers.items():
            _set_header(set_headers, key, value.encode())
    return response
