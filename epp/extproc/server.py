"""The picker's gRPC servers: ext_proc (+ health, reflection) and a separate health port.

The ext_proc port serves ``ExternalProcessor/Process`` (TLS unless disabled), reflection (so
``grpcurl list`` works) and, with ``--health-checking`` as upstream, the standard health service
(a gateway's active health check asks for the ext_proc service name). The health port is
plaintext, as kubelet's gRPC probes need; it may carry more services (the ``epp.v1`` API, see
:class:`ExtraServices`), guarded by their own interceptors. Each port has its own
:class:`~epp.extproc.health.HealthState`, both following readiness; only the health port's drains
(:meth:`ExtProcServer.drain`), so during a graceful drain kubelet sees NOT_SERVING while a
gateway's active health check on the ext_proc port keeps sending streams. Shutdown
follows the house order: NOT_SERVING first, then ``server.stop(grace)``: no new streams, and
in-flight ones finish or are cancelled when ``grace`` runs out.

The server declares the picker's process series (:class:`ServerSeries`): ``epp_ready``, which
follows the health port's readiness, and upstream's build-info gauge.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import grpc

from epp import __version__
from epp.extproc import pb
from epp.extproc.grpc_stream_metrics import GrpcStreamMetrics
from epp.extproc.health import HealthState
from epp.extproc.processor import Pipelines, Processor, StreamOptions
from epp.extproc.replies import Replies
from epp.extproc.stream import Stream
from epp.extproc.tls import ServerTls
from epp.framework.endpoint import join_host_port
from epp.tasks import TaskSet
from epp.telemetry.families import Names
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import CounterValue, Gauge
from epp.telemetry.tracing import Tracing

__all__ = ["SERVER_OPTIONS", "ExtProcOptions", "ExtProcServer", "ExtraServices", "ServerSeries", "bind_port"]

log = logging.getLogger(__name__)

_MAX_MESSAGE = 32 * 1024 * 1024
# The health port's (and the epp.v1 API port's) options; the ext_proc port's come from ExtProcOptions.
SERVER_OPTIONS = (
    ("grpc.max_receive_message_length", _MAX_MESSAGE),
    ("grpc.max_send_message_length", _MAX_MESSAGE),
    # Fail on a port another process holds instead of silently sharing it.
    ("grpc.so_reuseport", 0),
)


@dataclass(frozen=True, slots=True)
class ExtProcOptions:
    """Upstream's knobs of the ext_proc server (``--health-checking``, message sizes, stream metrics).

    ``health_checking``: the gRPC health service on the ext_proc port too (the health port always
    has it). Message sizes in bytes: None (flag unset) keeps ours, 32 MiB each way, so a BUFFERED
    body up to Envoy's limits arrives in one message; 0 means gRPC's own defaults (4 MiB received,
    no limit sent), as upstream treats 0.
    """

    health_checking: bool = False
    max_recv_msg_size: int | None = None
    max_send_msg_size: int | None = None
    stream_metrics: bool = False
    shared_port: bool = False
    """With ``--workers`` > 1 the port is bound by every worker (SO_REUSEPORT); else a port another process
    holds is an error, not silently shared."""

    def server_options(self) -> tuple[tuple[str, int], ...]:
        """The ext_proc server's grpc options (the health port keeps fixed ones)."""
        limits: list[tuple[str, int]] = []
        for key, size in (
            ("grpc.max_receive_message_length", self.max_recv_msg_size),
            ("grpc.max_send_message_length", self.max_send_msg_size),
        ):
            if size != 0:
                limits.append((key, _MAX_MESSAGE if size is None else size))
        return (*limits, ("grpc.so_reuseport", 1 if self.shared_port else 0))


@dataclass(frozen=True, slots=True)
class ExtraServices:
    """More services for a port (the health port, or the API's own): ``register`` adds them to a server
    and returns their names (for reflection); ``interceptors`` guard them (and must let health and
    reflection through)."""

    register: Callable[[Any], tuple[str, ...]]
    interceptors: tuple[Any, ...] = ()


class ServerSeries:
    """``epp_ready`` (ours) and upstream's ``inference_extension_info`` (1, with the build)."""

    def __init__(self, metrics: EppMetrics) -> None:
        self.ready = Gauge(
            "epp_ready",
            "1 while the health port reports readiness SERVING (every pool synced and, with leader election, "
            "the lease held), else 0; 0 from the start of a graceful drain.",
            registry=metrics.registry,
        )
        self.info = metrics.families.gauge(
            Names(
                "inference_extension_info",
                "llm_d_epp_info",
                "General information of the current build of Inference Extension.",
                labels=("commit", "build_ref"),
            )
        )
        self.info.labels("", f"epp-{__version__}").set(1)


class _ExtProcServicer(pb.ExternalProcessorServicer):  # type: ignore[misc]  # generated base is untyped
    def __init__(self, processor: Processor, sends: TaskSet, streams: CounterValue | None) -> None:
        self._processor = processor
        self._sends = sends
        self._streams = streams

    async def Process(self, request_iterator: Any, context: Any) -> None:  # noqa: N802 (gRPC method name)
        if self._streams is not None:
            self._streams.inc()
        await Stream(self._processor).run(request_iterator, Replies(context, self._sends))


class _MeteredExtProcServicer(_ExtProcServicer):
    """With ``--enable-grpc-stream-metrics``: each stream counted, timed and classified by its end."""

    def __init__(
        self, processor: Processor, sends: TaskSet, streams: CounterValue | None, metrics: GrpcStreamMetrics
    ) -> None:
        super().__init__(processor, sends, streams)
        self._metrics = metrics

    async def Process(self, request_iterator: Any, context: Any) -> None:  # noqa: N802 (gRPC method name)
        started = self._metrics.started()
        error: BaseException | None = None
        try:
            await super().Process(request_iterator, context)
        except BaseException as e:  # classified, then re-raised unchanged
            error = e
            raise
        finally:
            self._metrics.finished(started, error)


def bind_port(server: Any, what: str, address: str, credentials: grpc.ServerCredentials | None) -> int:
    """Add a listening port (TLS with ``credentials``); grpc's RuntimeError becomes an OSError naming its role."""
    try:
        port = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError as e:
        raise OSError(f"cannot listen on {what} address {address}: {e}") from e
    if not port:
        raise OSError(f"cannot listen on {what} address {address}")
    return int(port)


class ExtProcServer:
    """Owns both gRPC servers; ``start`` binds them, ``stop`` drains them."""

    def __init__(
        self,
        pipelines: Pipelines,
        metrics: EppMetrics,
        *,
        options: StreamOptions,
        tracing: Tracing | None = None,
        ext_proc: ExtProcOptions | None = None,
        health_port_services: ExtraServices | None = None,
        streams: CounterValue | None = None,
    ) -> None:
        self._processor = Processor(pipelines, metrics, options, tracing)
        self._streams = streams
        """Counted per stream (``epp_worker_streams_total`` of this process, with ``--workers`` > 1)."""
        self._ext_proc = ext_proc or ExtProcOptions()
        # Registered only when asked for, as upstream: the series do not exist otherwise.
        self._stream_metrics = metrics.series(GrpcStreamMetrics) if self._ext_proc.stream_metrics else None
        self._ready = metrics.series(ServerSeries).ready
        self._sends = TaskSet()
        """Each stream's last answer, sent while its RPC ends (:meth:`Replies.send_last`)."""
        self._health = HealthState()
        # The ext_proc port's own copy: same readiness, but it keeps serving through a drain.
        self._ext_proc_health = HealthState()
        self._extra = health_port_services
        self._servers: list[Any] = []

    @property
    def health(self) -> HealthState:
        """The health port's service (the ext_proc port's follows readiness too, but never drains)."""
        return self._health

    def set_ready(self, ready: bool) -> None:
        """SERVING for readiness, ``""`` and ext_proc once the pool is synced (liveness always is)."""
        self._health.set_ready(ready)
        self._ext_proc_health.set_ready(ready)
        self._ready.set(1 if self._health.ready else 0)

    def drain(self) -> None:
        """SIGTERM: the health port says NOT_SERVING (but liveness); ext_proc streams keep being served."""
        self._health.drain()
        self._ready.set(0)

    async def start(self, host: str, grpc_port: int, health_port: int | None, tls: ServerTls | None) -> tuple[int, int]:
        """Bind and start both servers; ports may be 0. Returns the bound (grpc, health) ports.

        ``health_port`` None: the ext_proc port only (a ``--workers`` child: the pod's health port is its parent's);
        the health port returned is then 0.
        """
        if self._servers:
            raise RuntimeError("ExtProcServer already started")
        ext_proc = grpc.aio.server(options=self._ext_proc.server_options())
        servicer = (
            _ExtProcServicer(self._processor, self._sends, self._streams)
            if self._stream_metrics is None
            else _MeteredExtProcServicer(self._processor, self._sends, self._streams, self._stream_metrics)
        )
        pb.add_ExternalProcessorServicer_to_server(servicer, ext_proc)
        if self._ext_proc.health_checking:
            pb.add_HealthServicer_to_server(self._ext_proc_health, ext_proc)
            pb.enable_server_reflection((pb.EXT_PROC_SERVICE, pb.HEALTH_SERVICE, pb.REFLECTION_SERVICE), ext_proc)
        else:
            pb.enable_server_reflection((pb.EXT_PROC_SERVICE, pb.REFLECTION_SERVICE), ext_proc)
        grpc_address = join_host_port(host, grpc_port)
        bound_grpc = bind_port(ext_proc, "ext_proc", grpc_address, tls.credentials() if tls else None)
        health, bound_health = None, 0
        if health_port is not None:
            extra = self._extra
            health = grpc.aio.server(options=SERVER_OPTIONS, interceptors=extra.interceptors if extra else None)
            pb.add_HealthServicer_to_server(self._health, health)
            names = extra.register(health) if extra else ()
            # Reflection here too, so `grpcurl -plaintext host:9003 grpc.health.v1.Health/Check` works bare.
            pb.enable_server_reflection((pb.HEALTH_SERVICE, *names, pb.REFLECTION_SERVICE), health)
            bound_health = bind_port(health, "health", join_host_port(host, health_port), None)
        await ext_proc.start()
        self._servers.append(ext_proc)
        if health is not None:
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
        """NOT_SERVING, no new streams, and in-flight ones get up to ``grace`` seconds to finish."""
        self._health.shutdown()
        self._ext_proc_health.shutdown()
        servers, self._servers = self._servers, []
        for server in servers:
            await server.stop(grace)
        await self._sends.stop()  # what a stream ended by the stop could not send
