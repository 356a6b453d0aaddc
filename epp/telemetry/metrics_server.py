"""``/metrics`` (the picker's own Prometheus series) and ``/healthz`` over HTTP(S), on ``--metrics-port``.

Serves a registry its owner holds (the picker's or the autoscaler's), never prometheus_client's global one.
Hooks registered as ``before_scrape`` (e.g. the pool gauges' refresh) run on the event loop just
before each scrape; the text itself is rendered on a worker thread, because a registry with many
labelled histograms takes milliseconds to render and the event loop serves ext_proc streams.

As upstream's controller-runtime metrics server: with ``auth`` (``--metrics-endpoint-auth``)
every handler, whatever the method, first asks :class:`~epp.telemetry.metrics_auth.MetricsAuth`;
with ``pprof`` (``--enable-pprof``) ``/debug/pprof/*`` is one of them, answering (after that
check) 404, since Go's profiler does not exist here; any other path is Go's unauthenticated
``404 page not found``. ``cert_dir`` (``--metrics-cert-dir``) serves HTTPS from its ``tls.crt`` and
``tls.key`` with TLS 1.2 at least; ``client_ca_file`` (``--metrics-client-ca-file``) then also
requires a client certificate that CA signed. The files are read once, at start.
"""

from __future__ import annotations

import asyncio
import logging
import os
import ssl
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from epp.telemetry.metrics_auth import MetricsAuth

__all__ = ["MetricsServer", "MetricsTlsError", "metrics_ssl_context"]

_log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class MetricsTlsError(ValueError):
    """The metrics certificate, key or client CA cannot be used; the message names the flag and file."""


def metrics_ssl_context(cert_dir: str, client_ca_file: str = "") -> ssl.SSLContext:
    """A server context from ``<cert_dir>/tls.crt`` and ``tls.key``, TLS ≥ 1.2, verifying clients if a CA is given.

    Reads files: call it off the event loop.
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(os.path.join(cert_dir, "tls.crt"), os.path.join(cert_dir, "tls.key"))
    except (OSError, ssl.SSLError) as e:
        raise MetricsTlsError(f"--metrics-cert-dir {cert_dir}: cannot use tls.crt and tls.key: {e}") from e
    if client_ca_file:
        try:
            context.load_verify_locations(cafile=client_ca_file)
        except (OSError, ssl.SSLError) as e:
            raise MetricsTlsError(f"--metrics-client-ca-file {client_ca_file}: no usable CA certificate: {e}") from e
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _plain_text(status: int, text: str) -> web.Response:
    """What Go's ``http.Error`` writes: the text and a newline, as UTF-8 plain text, nosniff."""
    return web.Response(
        status=status,
        text=f"{text}\n",
        content_type="text/plain",
        charset="utf-8",
        headers={"X-Content-Type-Options": "nosniff"},
    )


class HasRegistry(Protocol):
    """Anything that owns a registry: the picker's EppMetrics, the autoscaler's metrics."""

    @property
    def registry(self) -> CollectorRegistry: ...


class MetricsServer:
    """An aiohttp server for ``/metrics`` and ``/healthz``; start once, stop once."""

    def __init__(
        self,
        metrics: HasRegistry,
        *,
        before_scrape: Sequence[Callable[[], None]] = (),
        auth: MetricsAuth | None = None,
        pprof: bool = False,
        cert_dir: str = "",
        client_ca_file: str = "",
    ) -> None:
        self._registry = metrics.registry
        self._before_scrape = tuple(before_scrape)
        self._auth = auth
        self._pprof = pprof
        self._cert_dir = cert_dir
        self._client_ca_file = client_ca_file
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (port 0 picks a free one); returns the bound port."""
        if self._runner is not None:
            raise RuntimeError("metrics server already started")
        # Upstream (Go) exports no *_created series; match it. A process-wide switch, so it is
        # flipped when the server starts, never as an import side effect.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        tls = None
        if self._cert_dir:
            tls = await asyncio.to_thread(metrics_ssl_context, self._cert_dir, self._client_ca_file)
        app = web.Application()
        app.router.add_route("*", "/metrics", self._guarded(self._metrics))
        app.router.add_route("*", "/healthz", self._guarded(self._healthz))
        if self._pprof:
            app.router.add_route("*", "/debug/pprof/{rest:.*}", self._guarded(self._not_found))
        app.router.add_route("*", "/{rest:.*}", self._not_found)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host or None, port, ssl_context=tls)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        _log.info(
            "Metrics server listening",
            extra={"host": host, "port": bound[1], "https": tls is not None, "auth": self._auth is not None},
        )
        return int(bound[1])

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    def _guarded(self, handler: Handler) -> Handler:
        """``handler`` behind the authentication and authorization check, when there is one."""
        auth = self._auth
        if auth is None:
            return handler

        async def guarded(request: web.Request) -> web.StreamResponse:
            refusal = await auth.check(request.method, request.path, request.headers.get("Authorization", ""))
            if refusal is not None:
                return _plain_text(refusal.status, refusal.text)
            return await handler(request)

        return guarded

    async def _not_found(self, _request: web.Request) -> web.Response:
        return _plain_text(404, "404 page not found")

    async def _metrics(self, request: web.Request) -> web.Response:
        for hook in self._before_scrape:
            try:
                hook()
            except Exception:  # a broken hook must not take the other series down with it
                _log.exception("Metrics pre-scrape hook failed", extra={"hook": repr(hook)})
        encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
        body = await asyncio.to_thread(encoder, self._registry)
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok")
