"""The response half of one ext_proc stream: relay the model server's answer, read its usage.

Headers are answered at once with the picker's own response headers (and the upstream marker),
``content-length`` removed when the body will be rewritten. Bodies take one of two paths:

- **pass-through**: SSE (``stream: true`` or a ``text/event-stream`` content type) and anything
  past ``max_buffer`` bytes go back chunk by chunk as they arrive; an SSE scanner reads ``usage``
  on the way;
- **held**: a plain JSON answer is held until its end (``usage`` is read from the whole), then
  sent back in ``chunk_size`` pieces.

A response to a passthrough request (``read_body=False``) is neither held nor scanned: every
chunk goes straight back, as upstream's ``passthrough-parser`` reads no response.

When the client's model name differs from the one the server was sent, the server's name is
replaced by the client's (:class:`~epp.extproc.model_rename.ModelRenamer`), so the client sees the
name it asked for, even when a chunk boundary cuts through it (in Envoy's ``FULL_DUPLEX_STREAMED``
mode, the GIE mode; in the modes where every body message gets exactly one answer, each chunk is
renamed on its own). The relay is
:attr:`done` once the response is complete (end of stream, trailers, or a mode in which Envoy
sends no body); the stream then records it. It notes when the first body byte arrived
(:attr:`first_byte_at`, ``time.perf_counter()``): the time to first token that SLO-aware routing
learns from.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from time import perf_counter

from epp.extproc import pb
from epp.extproc.model_rename import ModelRenamer
from epp.extproc.responses import (
    body_chunk,
    body_chunks,
    response_body_replaced,
    response_headers_response,
    response_trailers_response,
)
from epp.extproc.usage import SseUsageScanner, Usage, usage_from_json
from epp.framework import headers

__all__ = ["ResponseRelay"]

_FULL_DUPLEX = pb.BODY_FULL_DUPLEX_STREAMED
_BODY_NONE = pb.BODY_NONE
_UPSTREAM_SERVICE_TIME = headers.UPSTREAM_SERVICE_TIME


class ResponseRelay:
    """Relays one response; ``done``, ``usage``, ``size``, ``status``, ``upstream_error``,
    ``from_upstream`` (the model server answered, not Envoy itself) and ``first_byte_at`` say how it went.

    ``mode`` is Envoy's response body mode; ``sse`` when the request asked for a stream;
    ``read_body`` False for a passthrough request (nothing held or scanned);
    ``rename`` is (served model, client model) when they differ; ``extra_headers`` are the
    picker's own response headers (e.g. a session token).
    """

    __slots__ = (
        "_mode",
        "_chunk_size",
        "_max_buffer",
        "_renamer",
        "_extra_headers",
        "_scanner",
        "_read_body",
        "_held",
        "_passing",
        "size",
        "done",
        "usage",
        "status",
        "upstream_error",
        "from_upstream",
        "first_byte_at",
    )

    def __init__(
        self,
        *,
        mode: int,
        chunk_size: int,
        max_buffer: int,
        sse: bool = False,
        read_body: bool = True,
        rename: tuple[str, str] | None = None,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        self._mode = mode
        self._chunk_size = chunk_size
        self._max_buffer = max_buffer
        self._renamer = ModelRenamer(*rename) if rename is not None and mode != _BODY_NONE else None
        self._extra_headers = extra_headers or {}
        self._scanner: SseUsageScanner | None = None
        self._read_body = read_body
        self._held: list[bytes] = []
        self._passing = not read_body
        self.size = 0
        self.done = False
        self.usage: Usage | None = None
        self.status = 0
        self.upstream_error = False
        self.from_upstream = False  # Envoy's own replies (could not connect, reset) are not
        self.first_byte_at: float | None = None
        if sse:
            self._pass_sse()

    def on_headers(self, http_headers: pb.HttpHeaders, added: Mapping[str, str] | None = None) -> pb.ProcessingResponse:
        """The headers answer: the marker and the picker's own headers; the upstream ones are only read.

        ``added`` are headers of this response alone (the conformance echo). Upstream's picker
        also echoes every response header back unchanged, which changes nothing for the client
        and costs a header option per header on both sides of the stream; only what differs is sent.
        """
        for header in http_headers.headers.headers:
            key = header.key
            if key == ":status" or key == "status":
                raw = (header.raw_value or header.value.encode()).strip()
                self.status = status = int(raw) if raw.isdigit() else 0
                self.upstream_error = status != 200
            elif key == "content-type" and b"text/event-stream" in (header.raw_value or header.value.encode()):
                self._pass_sse()
            elif key == _UPSTREAM_SERVICE_TIME:
                self.from_upstream = True
        extra = self._extra_headers
        if added:
            extra = {**extra, **added}
        if http_headers.end_of_stream or self._mode == _BODY_NONE:
            self._finish(None)  # No body follows, or Envoy will not send it to us.
        return response_headers_response(
            [(k, v.encode()) for k, v in extra.items()], remove_content_length=self._renamer is not None
        )

    def on_body(self, body: pb.HttpBody) -> Sequence[pb.ProcessingResponse]:
        chunk: bytes = body.body
        end: bool = body.end_of_stream
        if chunk and self.first_byte_at is None:
            self.first_byte_at = perf_counter()
        self.size += len(chunk)
        if self._passing:
            return self._pass(chunk, end)
        if chunk:
            self._held.append(chunk)
        if end:
            whole = self._take_held()
            self._finish(usage_from_json(whole))
            return (
                self._send_held(whole, end_of_stream=True, last=True) if self._full_duplex else (self._replaced(chunk),)
            )
        if self.size > self._max_buffer:
            # Too large to hold for its usage: hand over what is held, pass the rest through.
            self._passing = True
            whole = self._take_held()
            return (
                self._send_held(whole, end_of_stream=False, last=False)
                if self._full_duplex
                else (self._replaced(chunk),)
            )
        # Envoy in BUFFERED/STREAMED mode waits for an answer to every message; ours comes now.
        return () if self._full_duplex else (self._replaced(chunk),)

    def on_trailers(self) -> Sequence[pb.ProcessingResponse]:
        """Trailers end the response: flush what is held (without EoS), then answer them."""
        answers: list[pb.ProcessingResponse] = []
        if self._passing:
            if self._scanner is not None:
                self._scanner.finish()
                self._finish(self._scanner.usage)
            else:
                self._finish(None)
            rest = self._rename(b"", end=True)
            if rest and self._full_duplex:  # bytes held back by the renamer: they end the body
                answers.append(body_chunk(rest, request=False, end_of_stream=False))
        else:
            whole = self._take_held()
            if whole and self._full_duplex:
                answers += self._send_held(whole, end_of_stream=False, last=True)
            self._finish(usage_from_json(whole) if whole else None)
        answers.append(response_trailers_response())
        return answers

    @property
    def _full_duplex(self) -> bool:
        return self._mode == _FULL_DUPLEX

    def _pass_sse(self) -> None:
        self._passing = True
        if self._scanner is None and self._read_body:
            self._scanner = SseUsageScanner()

    def _pass(self, chunk: bytes, end: bool) -> Sequence[pb.ProcessingResponse]:
        scanner = self._scanner
        if scanner is not None:
            scanner.feed(chunk)
        if end:
            if scanner is not None:
                scanner.finish()
            self._finish(scanner.usage if scanner is not None else None)
        if self._full_duplex:
            return (body_chunk(self._rename(chunk, end=end), request=False, end_of_stream=end),)
        return (self._replaced(chunk),)

    def _replaced(self, chunk: bytes) -> pb.ProcessingResponse:
        """The one answer a body message gets outside FULL_DUPLEX_STREAMED: renamed on its own."""
        out = self._rename(chunk, end=True)
        return response_body_replaced(None if out is chunk else out)

    def _send_held(self, whole: bytes, *, end_of_stream: bool, last: bool) -> list[pb.ProcessingResponse]:
        """``whole`` in chunks; ``last``: no body follows (EoS, or trailers come next)."""
        out = self._rename(whole, end=last)
        return body_chunks(out, self._chunk_size, request=False, end_of_stream=end_of_stream)

    def _take_held(self) -> bytes:
        held, self._held = self._held, []
        return held[0] if len(held) == 1 else b"".join(held)

    def _rename(self, data: bytes, *, end: bool) -> bytes:
        renamer = self._renamer
        return data if renamer is None else renamer.feed(data, end=end)

    def _finish(self, usage: Usage | None) -> None:
        if not self.done:
            self.done = True
            self.usage = usage
