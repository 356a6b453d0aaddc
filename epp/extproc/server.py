"""The picker's gRPC servers: ext_proc (+ health, reflection) and a separate health port.

The ext_proc port serves ``ExternalProcessor/Process`` (TLS unless disabled), the standard health
service (Envoy's cluster health check asks for the ext_proc service name) and reflection (so
``grpcurl list`` works). The health port is plaintext, as kubelet's gRPC probes need, and serves
the same :class:`~epp.extproc.health.HealthState`. Shutdown follows the house order:
NOT_SERVING first, then ``server.stop(grace)`` so in-flight streams can finish.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from epp.extproc import pb
from epp.extproc.health import HealthState
from epp.extproc.stream import Directors, Processor, Stream, StreamOptions
from epp.extproc.tls import TlsConfig
from epp.framework.endpoint import join_host_port
from epp.telemetry.metrics import EppMetrics

__all__ = ["ExtProcServer"]

log = logging.getLogger(__name__)

_MAX_MESSAGE = 32 * 1024 * 1024
_SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    # Fail on a port another process holds instead of silently sharing it.
    ("grpc.so_reuseport", 0),
)


class _ExtProcServicer(pb.ExternalProcessorServicer):  # type: ignore[misc]  # generated base is untyped
    def __init__(self, processor: Processor) -> None:
        self._processor = processor

    async def Process(self, request_iterator: Any, context: Any) -> None:  # noqa: N802 (gRPC method name)
        await Stream(self._processor).run(request_iterator, context.write)


def _bind(server: Any, what: str, address: str, tls: TlsConfig | None) -> int:
    """Add a listening port; grpc's RuntimeError becomes an OSError naming the port's role."""
    try:
        port = server.add_secure_port(address, tls.credentials()) if tls else server.add_insecure_port(address)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {what} address {address}: {e}") from e
    if not port:
        raise OSError(f"cannot listen on {what} address {address}")
    return int(port)


class ExtProcServer:
    """Owns both gRPC servers; ``start`` binds them, ``stop`` drains them."""

    def __init__(self, directors: Directors, metrics: EppMetrics, *, options: StreamOptions) -> None:
        self._processor = Processor(directors, metrics, options)
        self._health = HealthState()
        self._servers: list[Any] = []

    @property
    def health(self) -> HealthState:
        """The health service both ports serve."""
        return self._health

    def set_ready(self, ready: bool) -> None:
        """SERVING for readiness, ``""`` and ext_proc once the pool is synced (liveness always is)."""
        self._health.set_ready(ready)

    async def start(self, host: str, grpc_port: int, health_port: int, tls: TlsConfig | None) -> tuple[int, int]:
        """Bind and start both servers; ports may be 0. Returns the bound (grpc, health) ports."""
        if self._servers:
            raise RuntimeError("ExtProcServer already started")
        ext_proc = grpc.aio.server(options=_SERVER_OPTIONS)
        pb.add_ExternalProcessorServicer_to_server(_ExtProcServicer(self._processor), ext_proc)
        pb.add_HealthServicer_to_server(self._health, ext_proc)
        pb.enable_server_reflection((pb.EXT_PROC_SERVICE, pb.HEALTH_SERVICE, pb.REFLECTION_SERVICE), ext_proc)
        health = grpc.aio.server(options=_SERVER_OPTIONS)
        pb.add_HealthServicer_to_server(self._health, health)
        # Reflection here too, so `grpcurl -plaintext host:9003 grpc.health.v1.Health/Check` works bare.
        pb.enable_server_reflection((pb.HEALTH_SERVICE, pb.REFLECTION_SERVICE), health)
        grpc_address = join_host_port(host, grpc_port)
        health_address = join_host_port(host, health_port)
        bound_grpc = _bind(ext_proc, "ext_proc", grpc_address, tls)
        bound_health = _bind(health, "health", health_address, None)
        await ext_proc.start()
        self._servers.append(ext_proc)
        try:
            await health.start()
        except BaseException:
            await ext_proc.stop(None)
            self._servers.clear()
            raise
        self._servers.append(health)
        log.info(
            "ext_proc serving",
            extra={"grpc_port": bound_grpc, "health_port": bound_health, "tls": tls is not None},
        )
        return bound_grpc, bound_health

    async def stop(self, grace: float) -> None:
        """NOT_SERVING, then let in-flight streams finish for up to ``grace`` seconds."""
        self._health.shutdown()
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop(grace)
