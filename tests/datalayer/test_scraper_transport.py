"""ScraperManager under a scrape spec: CA-checked HTTPS, mTLS, per-source interval, and swapping the spec.

Real aiohttp servers on loopback addresses (one per test), the scraper's own connections; the
injected clock decides when polls happen.
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

from aiohttp import web
from model_server_tls import client_cert, server_tls

from epp.clock import ManualClock
from epp.config.options import ModelServerMetricsOptions
from epp.datalayer.scrape_spec import build_scrape_spec
from epp.datalayer.scraper import ScraperManager
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.datalayer import MetricsSourceSpec, ScrapeSpec
from epp.framework.endpoint import EndpointState
from epp.framework.engine_metrics import EngineTable
from epp.labels import parse_selector
from epp.telemetry.metrics import EppMetrics
from epp_sim.waits import wait_until

NS = "llm"
SGLANG = b"sglang:num_queue_reqs 7\nsglang:num_running_reqs 3\nsglang:token_usage 0.25\n"
NO_FLAGS = ModelServerMetricsOptions()


class PageServer:
    """Serves ``page`` on any path; records (path, connection) of each request."""

    def __init__(self, page: bytes) -> None:
        self.page = page
        self.requests: list[tuple[str, int]] = []

    async def _handle(self, request: web.Request) -> web.Response:
        self.requests.append((request.path, id(request.transport)))
        return web.Response(body=self.page, content_type="text/plain")

    @property
    def connections(self) -> set[int]:
        return {conn for _, conn in self.requests}

    @contextlib.asynccontextmanager
    async def serving(self, host: str, tls: ssl.SSLContext | None = None) -> AsyncIterator[int]:
        app = web.Application()
        app.router.add_get("/{path:.*}", self._handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        await web.TCPSite(runner, host, 0, ssl_context=tls).start()
        try:
            yield int(runner.addresses[0][1])
        finally:
            await runner.cleanup()


def one_pod(host: str, port: int, labels: dict[str, str] | None = None) -> Datastore:
    store = Datastore()
    store.set_pool(PoolSpec("pool", NS, parse_selector("app=m"), (port,)))
    store.upsert_pod(PodInfo("pod", NS, host, labels={"app": "m", **(labels or {})}, ready=True))
    return store


def only(store: Datastore) -> EndpointState:
    (state,) = store.endpoints()
    return state


def errors(metrics: EppMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("epp_scrape_errors_total", {"reason": reason}) or 0.0


@contextlib.asynccontextmanager
async def running(scraper: ScraperManager) -> AsyncIterator[ScraperManager]:
    await scraper.start()
    try:
        yield scraper
    finally:
        await scraper.stop()


def sglang_spec(source: MetricsSourceSpec | None = None) -> ScrapeSpec:
    table = EngineTable(default_engine="sglang")
    return build_scrape_spec(source, table, NO_FLAGS)


async def test_https_checks_the_server_against_the_configured_ca(tmp_path: Path) -> None:
    tls, ca = server_tls(tmp_path, "127.0.0.21")
    other_ca, _ = client_cert(tmp_path)  # a CA that did not sign the server's certificate
    server = PageServer(SGLANG)
    async with server.serving("127.0.0.21", tls) as port:
        metrics = EppMetrics()
        wrong = sglang_spec(MetricsSourceSpec(scheme="https", insecure_skip_verify=False, ca_cert_path=str(other_ca)))
        store = one_pod("127.0.0.21", port)
        async with running(ScraperManager(store, ManualClock(), metrics, spec=wrong)) as scraper:
            await wait_until(lambda: errors(metrics, "connect") == 1, message="the untrusted server refused")
            assert only(store).metrics.updated_at == 0.0 and server.requests == []
            right = sglang_spec(MetricsSourceSpec(scheme="https", insecure_skip_verify=False, ca_cert_path=str(ca)))
            scraper.apply(right)  # a reload with the right bundle: new connections, checked against it
            await wait_until(lambda: only(store).metrics.waiting_queue == 7, message="scraped over checked TLS")
            assert server.requests[0][0] == "/metrics"


async def test_mtls_presents_the_client_certificate(tmp_path: Path) -> None:
    cert, key = client_cert(tmp_path)
    tls, _ = server_tls(tmp_path, "127.0.0.22", client_ca=cert)  # the server wants a client certificate
    server = PageServer(SGLANG)
    async with server.serving("127.0.0.22", tls) as port:
        metrics = EppMetrics()
        store = one_pod("127.0.0.22", port)
        anonymous = sglang_spec(MetricsSourceSpec(scheme="https"))
        async with running(ScraperManager(store, ManualClock(), metrics, spec=anonymous)) as scraper:
            await wait_until(lambda: errors(metrics, "connect") >= 1, message="refused without a certificate")
            assert server.requests == []
            mtls = MetricsSourceSpec(scheme="https", client_cert_path=str(cert), client_key_path=str(key))
            scraper.apply(sglang_spec(mtls))
            await wait_until(lambda: only(store).metrics.running == 3, message="scraped with the client certificate")


async def test_a_new_transport_replaces_the_connection_and_new_maps_reuse_it() -> None:
    server = PageServer(SGLANG)
    async with server.serving("127.0.0.23") as port:
        clock, metrics = ManualClock(), EppMetrics()
        store = one_pod("127.0.0.23", port)
        async with running(ScraperManager(store, clock, metrics)) as scraper:  # default: vLLM's names
            await wait_until(lambda: errors(metrics, "parse") == 1, message="SGLang's page read as vLLM's")
            scraper.apply(sglang_spec())  # same transport: the running task reads the new map
            clock.advance(1.0)
            await wait_until(lambda: only(store).metrics.waiting_queue == 7)
            assert len(server.connections) == 1 and scraper.scraped == {f"{NS}/pod-rank-0"}
            scraper.apply(sglang_spec(MetricsSourceSpec(path="/other")))  # a new transport: a new task
            await wait_until(lambda: server.requests[-1][0] == "/other", message="the new path scraped")
            assert len(server.connections) == 2
            requests = len(server.requests)
            scraper.apply(sglang_spec(MetricsSourceSpec(path="/other")))  # the same spec again: nothing changes
            clock.advance(1.0)
            await wait_until(lambda: len(server.requests) == requests + 1)
            assert len(server.connections) == 2


async def test_the_source_interval_is_rounded_to_the_base_tick_and_can_exceed_max_backoff() -> None:
    server = PageServer(SGLANG)
    async with server.serving("127.0.0.24") as port:
        clock = ManualClock()
        store = one_pod("127.0.0.24", port)
        spec = sglang_spec(MetricsSourceSpec(interval=5.0))
        scraper = ScraperManager(
            store, clock, EppMetrics(), interval=0.3, max_backoff=2.0, spec=spec, phase=lambda key, interval: 0.0
        )
        async with running(scraper):
            await wait_until(lambda: len(server.requests) == 1 and clock.sleepers == 1)
            clock.advance(5.05)  # 5 s is 16.67 ticks of 0.3 s: 17 ticks, 5.1 s (unrounded, it would poll now)
            await wait_until(lambda: clock.sleepers == 1)
            assert len(server.requests) == 1
            clock.advance(0.1)
            await wait_until(lambda: len(server.requests) == 2)
