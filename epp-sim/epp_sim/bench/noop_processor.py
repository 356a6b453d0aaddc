"""A no-op ext_proc server: the benchmark baseline for "what does a Python processor cost".

Same stack as the picker (grpc.aio, the upb messages of :mod:`epp.extproc.pb`) but no decision: every phase is
answered with the CONTINUE-equivalent response, so Envoy + this server measures the ext_proc
round trips alone. In FULL_DUPLEX_STREAMED every body chunk must still be answered, so each one
is echoed back as a streamed body response; in BUFFERED (or STREAMED) an empty BodyResponse
leaves the body as it is. The body mode is read from the ``protocol_config`` Envoy sends on the
first message of each stream.

With ``destinations`` given, the request-headers response carries the GIE routing decision
(header and ``envoy.lb`` metadata), round robin over them, so Envoy's ORIGINAL_DST cluster can
route. Like the picker it ends its RPC as soon as the exchange is complete (the response's end
of stream, or its trailers), so the final status goes out before Envoy resets the stream: the
baseline is a minimal *correct* processor, not one that leaves streams for the gateway to kill.
Responses that do not depend on the request are built once. It also serves gRPC health (SERVING
for the ext_proc service), which Envoy's cluster health check probes.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import AsyncIterator, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from epp.extproc import pb
from epp.framework.endpoint import join_host_port
from epp.framework.headers import DESTINATION_ENDPOINT, LB_METADATA_NAMESPACE

__all__ = ["NoopProcessor"]

log = logging.getLogger(__name__)

_FULL_DUPLEX = pb.BODY_FULL_DUPLEX_STREAMED


def _headers_response(destination: str | None) -> pb.ProcessingResponse:
    if destination is None:
        return pb.ProcessingResponse(request_headers=pb.HeadersResponse())
    header = pb.HeaderValueOption(
        header=pb.HeaderValue(key=DESTINATION_ENDPOINT, raw_value=destination.encode()),
        # Overwrite whatever the client sent under the same name.
        append_action=pb.OVERWRITE_IF_EXISTS_OR_ADD,
    )
    response = pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(
            response=pb.CommonResponse(
                clear_route_cache=True,
                header_mutation=pb.HeaderMutation(set_headers=[header]),
            )
        )
    )
    response.dynamic_metadata.get_or_create_struct(LB_METADATA_NAMESPACE)[DESTINATION_ENDPOINT] = destination
    return response


def _echo(body: pb.HttpBody) -> pb.BodyResponse:
    return pb.BodyResponse(
        response=pb.CommonResponse(
            body_mutation=pb.BodyMutation(
                streamed_response=pb.StreamedBodyResponse(body=body.body, end_of_stream=body.end_of_stream)
            )
        )
    )


class _Servicer(pb.ExternalProcessorServicer):  # type: ignore[misc]
    def __init__(self, destinations: Sequence[str]) -> None:
        routes = [_headers_response(d) for d in destinations] or [_headers_response(None)]
        self._request_headers = itertools.cycle(routes)
        self._response_headers = pb.ProcessingResponse(response_headers=pb.HeadersResponse())
        self._request_body = pb.ProcessingResponse(request_body=pb.BodyResponse())
        self._response_body = pb.ProcessingResponse(response_body=pb.BodyResponse())
        self._request_trailers = pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
        self._response_trailers = pb.ProcessingResponse(response_trailers=pb.TrailersResponse())
        self.streams = 0

    async def Process(  # noqa: N802 - the gRPC method name
        self, requests: AsyncIterator[pb.ProcessingRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[pb.ProcessingResponse]:
        self.streams += 1
        duplex_request = duplex_response = False
        async for request in requests:
            if request.HasField("protocol_config"):
                config = request.protocol_config
                duplex_request = config.request_body_mode == _FULL_DUPLEX
                duplex_response = config.response_body_mode == _FULL_DUPLEX
            kind = request.WhichOneof("request")
            if kind == "request_headers":
                yield next(self._request_headers)
            elif kind == "request_body":
                yield (
                    pb.ProcessingResponse(request_body=_echo(request.request_body))
                    if duplex_request
                    else self._request_body
                )
            elif kind == "response_headers":
                yield self._response_headers
                if request.response_headers.end_of_stream:
                    return
            elif kind == "response_body":
                yield (
                    pb.ProcessingResponse(response_body=_echo(request.response_body))
                    if duplex_response
                    else self._response_body
                )
                if request.response_body.end_of_stream:
                    return
            elif kind == "request_trailers":
                yield self._request_trailers
            elif kind == "response_trailers":
                yield self._response_trailers
                return
            else:
                log.warning("ignoring an ext_proc message with no phase", extra={"phase": kind})


class NoopProcessor:
    """The no-op ext_proc server; ``destinations`` (``ip:port``) make it route requests there, round robin."""

    def __init__(self, destinations: Sequence[str] = (), *, credentials: grpc.ServerCredentials | None = None) -> None:
        self._servicer = _Servicer(destinations)
        self._credentials = credentials
        self._server: grpc.aio.Server | None = None

    @property
    def streams(self) -> int:
        """ext_proc streams opened so far (one per HTTP request Envoy processed)."""
        return self._servicer.streams

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Listen on ``host:port`` (0: any free port); return the bound port."""
        if self._server is not None:
            raise RuntimeError("NoopProcessor already started")
        # so_reuseport off: a port already in use must fail, not be silently shared.
        server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
        pb.add_ExternalProcessorServicer_to_server(self._servicer, server)
        health = health_aio.HealthServicer()
        await health.set(pb.EXT_PROC_SERVICE, health_pb2.HealthCheckResponse.SERVING)
        health_pb2_grpc.add_HealthServicer_to_server(health, server)
        address = join_host_port(host, port)
        bound = (
            server.add_secure_port(address, self._credentials)
            if self._credentials is not None
            else server.add_insecure_port(address)
        )
        await server.start()
        self._server = server
        log.info("no-op ext_proc listening", extra={"address": address, "port": bound})
        return int(bound)

    async def stop(self, grace: float | None = None) -> None:
        """Stop serving; in-flight streams get ``grace`` seconds (None: cancelled at once)."""
        server, self._server = self._server, None
        if server is not None:
            await server.stop(grace)
