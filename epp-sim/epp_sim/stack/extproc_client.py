"""An Envoy-like ext_proc client: builds the messages Envoy sends and reads the answers.

Used by the hermetic tests, ``epp bench`` (direct gRPC mode) and anyone probing a picker
without an Envoy in front. It speaks the same upb messages as the server (``pb``).
:class:`ExtProcClient` sends one whole request the way Envoy does in the GIE mode
(FULL_DUPLEX_STREAMED) and returns what the picker decided as a :class:`Routed`.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc

from epp.extproc import pb
from epp.framework.headers import (
    DESTINATION_ENDPOINT,
    DESTINATION_ENDPOINT_SCORES,
    DESTINATION_ENDPOINT_SUBSET,
    LB_METADATA_NAMESPACE,
)

__all__ = [
    "ExtProcCall",
    "ExtProcClient",
    "Routed",
    "destination_metadata",
    "endpoint_scores",
    "post_headers",
    "protocol",
    "request_body",
    "request_headers",
    "response_body",
    "response_headers",
    "response_trailers",
    "set_headers",
    "streamed",
]


def _header_map(headers: Mapping[str, str] | Sequence[tuple[str, str]], *, raw: bool = True) -> Any:
    items = headers.items() if isinstance(headers, Mapping) else headers
    header_map = pb.HeaderMap()
    for key, value in items:
        if raw:
            header_map.headers.add(key=key, raw_value=value.encode())
        else:
            header_map.headers.add(key=key, value=value)
    return header_map


def protocol(request_mode: int = pb.BODY_FULL_DUPLEX_STREAMED, response_mode: int | None = None) -> Any:
    return pb.ProtocolConfiguration(
        request_body_mode=request_mode, response_body_mode=request_mode if response_mode is None else response_mode
    )


def request_headers(
    headers: Mapping[str, str] | Sequence[tuple[str, str]],
    *,
    eos: bool = False,
    raw: bool = True,
    config: Any = None,
    subset: list[Any] | None = None,
) -> Any:
    msg = pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=_header_map(headers, raw=raw), end_of_stream=eos))
    if config is not None:
        msg.protocol_config.CopyFrom(config)
    if subset is not None:
        hint = msg.metadata_context.filter_metadata["envoy.lb.subset_hint"]
        values = hint.fields[DESTINATION_ENDPOINT_SUBSET].list_value
        values.SetInParent()  # an empty list is still a list
        values.extend(subset)
    return msg


def request_body(body: bytes, *, eos: bool = True) -> Any:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=eos))


def response_headers(headers: Mapping[str, str], *, eos: bool = False) -> Any:
    return pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=_header_map(headers), end_of_stream=eos))


def response_body(body: bytes, *, eos: bool = False) -> Any:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=body, end_of_stream=eos))


def response_trailers() -> Any:
    return pb.ProcessingRequest(response_trailers=pb.HttpTrailers())


def post_headers(path: str = "/v1/completions", **extra: str) -> dict[str, str]:
    return {":method": "POST", ":path": path, ":authority": "gw", "content-type": "application/json", **extra}


# -- reading answers -----------------------------------------------------------------------------


def set_headers(mutation: Any) -> dict[str, bytes]:
    """The header mutation as {key: raw value}; asserts every entry overwrites and none repeats."""
    out: dict[str, bytes] = {}
    for option in mutation.set_headers:
        if option.append_action != pb.OVERWRITE_IF_EXISTS_OR_ADD:
            raise ValueError(f"header {option.header.key} is not set with OVERWRITE_IF_EXISTS_OR_ADD")
        if option.header.key in out:
            raise ValueError(f"duplicate header {option.header.key}")
        out[option.header.key] = option.header.raw_value
    return out


def destination_metadata(response: Any) -> str:
    return str(
        response.dynamic_metadata.fields[LB_METADATA_NAMESPACE].struct_value.fields[DESTINATION_ENDPOINT].string_value
    )


def endpoint_scores(response: Any) -> dict[str, float]:
    """``--emit-endpoint-scores``: each candidate's ``ip:port`` → weighted score (empty without the flag)."""
    lb = response.dynamic_metadata.fields[LB_METADATA_NAMESPACE].struct_value.fields
    if DESTINATION_ENDPOINT_SCORES not in lb:
        return {}
    return {k: v.number_value for k, v in lb[DESTINATION_ENDPOINT_SCORES].struct_value.fields.items()}


def streamed(response: Any, *, request: bool = True) -> tuple[bytes, bool]:
    body = response.request_body if request else response.response_body
    chunk = body.response.body_mutation.streamed_response
    return chunk.body, chunk.end_of_stream


class ExtProcCall:
    """One Process stream driven like Envoy drives it: write messages, read answers."""

    def __init__(self, stub: Any, *, timeout: float = 5.0) -> None:
        self.call = stub.Process()
        self.timeout = timeout

    async def send(self, *messages: Any) -> None:
        for message in messages:
            await self.call.write(message)

    async def recv(self, n: int = 1) -> list[Any]:
        out: list[Any] = []
        for _ in range(n):
            message = await asyncio.wait_for(self.call.read(), self.timeout)
            if message is grpc.aio.EOF:
                raise EOFError(f"stream ended after {len(out)} of {n} answers")
            out.append(message)
        return out

    async def recv_one(self) -> Any:
        return (await self.recv(1))[0]

    async def end(self) -> list[Any]:
        """Half-close, then collect whatever is left until the server ends the stream."""
        await self.call.done_writing()
        return await self.rest()

    async def rest(self) -> list[Any]:
        out: list[Any] = []
        while (message := await asyncio.wait_for(self.call.read(), self.timeout)) is not grpc.aio.EOF:
            out.append(message)
        return out


@dataclass
class Routed:
    """What the picker answered for one request."""

    status: int  # 200 = routed; otherwise the ImmediateResponse status
    endpoint: str = ""  # x-gateway-destination-endpoint
    metadata_endpoint: str = ""  # the same, from the envoy.lb dynamic metadata
    headers: dict[str, bytes] = field(default_factory=dict)  # every header the picker set (errors' too)
    body: bytes = b""  # the request body as the picker streamed it back (rewritten or not)
    error: bytes = b""  # the ImmediateResponse body
    endpoint_scores: dict[str, float] = field(default_factory=dict)  # --emit-endpoint-scores' envoy.lb struct


class ExtProcClient:
    """A gRPC channel to a picker's ext_proc port; ``async with ExtProcClient("127.0.0.1:9002"):``."""

    def __init__(self, target: str, *, timeout: float = 5.0) -> None:
        self.target = target
        self.timeout = timeout
        self._channel: Any = None

    async def __aenter__(self) -> ExtProcClient:
        self._channel = grpc.aio.insecure_channel(self.target)
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        channel, self._channel = self._channel, None
        if channel is not None:
            await channel.close()

    def open(self) -> ExtProcCall:
        """A new Process stream, to drive message by message."""
        if self._channel is None:
            raise RuntimeError("ExtProcClient is not open")
        return ExtProcCall(pb.ExternalProcessorStub(self._channel), timeout=self.timeout)

    async def route(
        self,
        body: Mapping[str, Any] | bytes,
        *,
        path: str = "/v1/completions",
        headers: Mapping[str, str] | None = None,
        chunks: int = 1,
        subset: list[Any] | None = None,
    ) -> Routed:
        """One FULL_DUPLEX_STREAMED request: headers, the body in ``chunks`` pieces, the answer."""
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        call = self.open()
        await call.send(request_headers(post_headers(path, **dict(headers or {})), subset=subset))
        size = max(1, -(-len(raw) // chunks))
        pieces = [raw[i : i + size] for i in range(0, len(raw), size)] or [b""]
        for i, piece in enumerate(pieces):
            await call.send(request_body(piece, eos=i == len(pieces) - 1))
        first = await call.recv_one()
        if first.HasField("immediate_response"):
            await call.end()
            immediate = first.immediate_response
            return Routed(immediate.status.code, headers=set_headers(immediate.headers), error=immediate.body)
        mutation = first.request_headers.response.header_mutation
        out = bytearray()
        while True:
            chunk, eos = streamed(await call.recv_one())
            out += chunk
            if eos:
                break
        await call.end()
        headers_set = set_headers(mutation)
        return Routed(
            200,
            endpoint=headers_set[DESTINATION_ENDPOINT].decode(),
            metadata_endpoint=destination_metadata(first),
            headers=headers_set,
            body=bytes(out),
            endpoint_scores=endpoint_scores(first),
        )
