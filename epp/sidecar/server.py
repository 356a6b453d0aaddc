"""``epp sidecar``'s servers: a listener per data-parallel rank in front of the local engine, and /metrics.

Rank ``r`` of ``--data-parallel-size`` listens on ``--port + r`` and talks to the engine on
``--model-server-port + r`` (upstream ``data_parallel.go``). Each listener answers ``GET /health``
with 200, sends the inference paths through :class:`~epp.sidecar.handler.Disaggregator` and
proxies every other request (``/metrics``, ``/v1/models``, ...) to its engine unchanged, streaming.
The main listener also honours ``x-data-parallel-host-port``: the header names a rank as
``<pod IP>:<rank port>`` (``POD_IP``, else the bound address), and the request goes to that
rank's engine. With ``--secure-proxy`` (the default) they serve TLS from ``--cert-path``'s
``tls.crt``/``tls.key``, else from a self-signed certificate made at start (read once: a new
certificate needs a restart, where upstream reloads it).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import ssl
import tempfile
from contextlib import AsyncExitStack

from aiohttp import web

from epp.extproc.tls import TlsConfig
from epp.framework.endpoint import join_host_port
from epp.sidecar.allowlist import AllowEverything, Allowlist, PoolAllowlist
from epp.sidecar.connectors import api_of
from epp.sidecar.handler import Disaggregator
from epp.sidecar.metrics import SidecarMetrics
from epp.sidecar.options import SidecarOptions
from epp.sidecar.prefill import PrefillSender
from epp.sidecar.upstreams import Upstreams, forwarded_headers, open_stream, relay
from epp.tasks import Service
from epp.telemetry.metrics_server import MetricsServer

__all__ = ["Sidecar"]

log = logging.getLogger(__name__)

_MAX_BODY = 64 * 1024 * 1024
_SHUTDOWN_GRACE = 5.0  # seconds in-flight requests get when the sidecar stops
_SELF_SIGNED_KEY_BITS = 2048  # per start of every decode pod; the picker's own keeps upstream's 4096


class Sidecar(Service):
    """The sidecar of one decode pod; ``ports`` are bound once started (port 0 picks free ones)."""

    def __init__(
        self,
        options: SidecarOptions,
        *,
        metrics: SidecarMetrics | None = None,
        allowlist: Allowlist | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.options = options
        self.metrics = metrics or SidecarMetrics()
        self._allowlist = allowlist
        self._rng = rng or random.Random()
        self._exit = AsyncExitStack()
        self._upstreams = Upstreams(options)
        self.ports: list[int] = []
        self.metrics_port = 0

    @property
    def pod_ip(self) -> str:
        """How the picker names this pod in ``x-data-parallel-host-port``."""
        bound = self.options.bind_address
        return self.options.pod_ip or ("" if bound in ("0.0.0.0", "::") else bound)

    async def start(self) -> None:
        options = self.options
        allowlist = self._allowlist
        if allowlist is None:
            if options.ssrf_protection:
                allowlist = PoolAllowlist(
                    namespace=options.pool_namespace,
                    pool_name=options.pool_name,
                    pool_group=options.pool_group,
                    kubeconfig=options.kubeconfig,
                )
                await self._exit.enter_async_context(allowlist)
            else:
                allowlist = AllowEverything()
        self._upstreams.start()
        self._exit.push_async_callback(self._upstreams.close)
        tls = await asyncio.to_thread(_server_tls, options.cert_path) if options.secure_proxy else None
        prefill = PrefillSender(
            retries=options.prefill_max_retries,
            backoff=options.prefill_retry_backoff,
            timeout=options.prefill_timeout,
            metrics=self.metrics,
        )
        engine = f"{options.scheme('decoder')}://{_bracketed(options.model_server_host)}"
        decoders = [f"{engine}:{options.model_server_port + r}" for r in range(options.data_parallel_size)]
        ranks: dict[str, str] = {}
        for rank in range(options.data_parallel_size):
            handler = Disaggregator(
                options,
                upstreams=self._upstreams,
                allowlist=allowlist,
                metrics=self.metrics,
                prefill=prefill,
                decoder=decoders[rank],
                ranks=ranks if rank == 0 else None,
                rng=self._rng,
            )
            port = options.port + rank if options.port else 0
            bound = await self._listen(self._app(handler, decoders[rank]), port, tls)
            self.ports.append(bound)
            ranks[join_host_port(self.pod_ip, bound)] = decoders[rank]
        if options.metrics_port:
            server = MetricsServer(self.metrics)
            self.metrics_port = await server.start(options.bind_address, options.metrics_port)
            self._exit.push_async_callback(server.stop)
        log.info(
            "sidecar listening",
            extra={
                "ports": self.ports,
                "engine": decoders,
                "kv_connector": options.kv_connector,
                "tls": tls is not None,
                "ssrf_protection": options.ssrf_protection,
            },
        )

    async def stop(self) -> None:
        exit_stack, self._exit = self._exit, AsyncExitStack()
        await exit_stack.aclose()

    def _app(self, handler: Disaggregator, decoder: str) -> web.Application:
        upstreams = self._upstreams

        async def health(_: web.Request) -> web.Response:
            return web.Response()

        async def route(request: web.Request) -> web.StreamResponse:
            api = api_of(request.path) if request.method == "POST" else None
            if api is not None:
                return await handler.handle(request, api)
            data = request.content if request.body_exists else None
            answer = await open_stream(
                upstreams.session("decoder"),
                request.method,
                f"{decoder}{request.path_qs}",
                headers=forwarded_headers(request.headers),
                data=data,
            )
            return answer if isinstance(answer, web.Response) else await relay(request, answer)

        app = web.Application(client_max_size=_MAX_BODY)
        app.router.add_get("/health", health)
        app.router.add_route("*", "/{tail:.*}", route)
        return app

    async def _listen(self, app: web.Application, port: int, tls: ssl.SSLContext | None) -> int:
        # A client that goes away cancels its handler, which drops the engine's request too (vLLM aborts it).
        runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=_SHUTDOWN_GRACE, handler_cancellation=True
        )
        await runner.setup()
        self._exit.push_async_callback(runner.cleanup)
        site = web.TCPSite(runner, self.options.bind_address, port, ssl_context=tls)
        await site.start()
        return int(runner.addresses[0][1])


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _server_tls(cert_path: str) -> ssl.SSLContext:
    """The listeners' TLS: ``cert_path``'s pair, else a fresh self-signed one (runs in a worker thread)."""
    pair = TlsConfig.load(cert_path) if cert_path else TlsConfig.self_signed(key_size=_SELF_SIGNED_KEY_BITS)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="epp-sidecar-tls-") as work:
        cert, key = os.path.join(work, "tls.crt"), os.path.join(work, "tls.key")
        with open(cert, "wb") as f:
            f.write(pair.cert_pem)
        with open(key, "wb") as f:
            f.write(pair.key_pem)
        context.load_cert_chain(cert, key)
    return context
