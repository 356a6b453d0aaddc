"""``/metrics`` (the picker's own Prometheus series) and ``/healthz`` over HTTP, on ``--metrics-port``.

Serves a registry its owner holds (the picker's or the autoscaler's), never prometheus_client's global one.
Hooks registered as ``before_scrape`` (e.g. the pool gauges' refresh) run on the event loop just
before each scrape; the text itself is rendered on a worker thread, because a registry with many
labelled histograms takes milliseconds to render and the event loop serves ext_proc streams.
Authentication (upstream's TokenReview guard) is not done here.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import prometheus_client
from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

__all__ = ["MetricsServer"]

_log = logging.getLogger(__name__)


class HasRegistry(Protocol):
    """Anything that owns a registry: the picker's EppMetrics, the autoscaler's metrics."""

    @property
    def registry(self) -> CollectorRegistry: ...


class MetricsServer:
    """An aiohttp server for ``/metrics`` and ``/healthz``; start once, stop once."""

    def __init__(self, metrics: HasRegistry, *, before_scrape: Sequence[Callable[[], None]] = ()) -> None:
        self._registry = metrics.registry
        self._before_scrape = tuple(before_scrape)
        self._runner: web.AppRunner | None = None

    async def start(self, host: str, port: int) -> int:
        """Listen on ``host:port`` (port 0 picks a free one); returns the bound port."""
        if self._runner is not None:
            raise RuntimeError("metrics server already started")
        # Upstream (Go) exports no *_created series; match it. A process-wide switch, so it is
        # flipped when the server starts, never as an import side effect.
        prometheus_client.disable_created_metrics()  # type: ignore[no-untyped-call]
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            site = web.TCPSite(runner, host or None, port)
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        bound = runner.addresses[0]
        _log.info("Metrics server listening", extra={"host": host, "port": bound[1]})
        return int(bound[1])

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

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
