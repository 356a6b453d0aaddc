"""ScraperManager against real aiohttp model servers on distinct loopback addresses (127.0.0.x)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import pytest
from aiohttp import web
from vllm_metrics_fixture import VllmPage, render_vllm_metrics

from epp.clock import ManualClock, SystemClock
from epp.datalayer.scraper import ScraperManager, Scrapers, scrape_phase
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import ENGINE_TYPE_LABEL, EndpointState
from epp.framework.health import Health
from epp.labels import parse_selector
from epp.telemetry.metrics import EppMetrics
from epp_sim.waits import wait_until

NS = "llm"
ScrapersT = TypeVar("ScrapersT", bound=Scrapers)


def no_phase(key: str, interval: float) -> float:
    """Every endpoint on the same phase, so tests count ticks of the interval exactly."""
    return 0.0


class ModelServer:
    """A model server whose /metrics page, status and hanging the test controls."""

    def __init__(self, host: str) -> None:
        self.host = host
        self.body = render_vllm_metrics()
        self.status = 200
        self.hang = False
        self.hits = 0
        self.before_answer: Callable[[], None] = lambda: None
        self._release = asyncio.Event()
        self._runner: web.AppRunner | None = None

    async def _handle(self, _request: web.Request) -> web.Response:
        self.hits += 1
        self.before_answer()
        if self.hang:
            await self._release.wait()
        return web.Response(text=self.body, status=self.status, content_type="text/plain")

    async def start(self, port: int) -> int:
        app = web.Application()
        app.router.add_get("/metrics", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, port)
        await site.start()
        return int(self._runner.addresses[0][1])

    async def stop(self) -> None:
        self._release.set()
        if self._runner is not None:
            await self._runner.cleanup()


@contextlib.asynccontextmanager
async def model_servers(*hosts: str, port: int = 0) -> AsyncIterator[tuple[int, list[ModelServer]]]:
    """Servers on the same port of different loopback addresses (the pool has one target port)."""
    servers = [ModelServer(h) for h in hosts]
    try:
        port = await servers[0].start(port)
        for s in servers[1:]:
            await s.start(port)
        yield port, servers
    finally:
        for s in servers:
            await s.stop()


class RecordingClock(ManualClock):
    """A ManualClock that records each task's sleeps, so backoff is asserted, not inferred."""

    def __init__(self) -> None:
        super().__init__()
        self.sleeps: dict[str, list[float]] = {}

    async def sleep(self, seconds: float) -> None:
        task = asyncio.current_task()
        self.sleeps.setdefault(task.get_name() if task else "", []).append(round(seconds, 6))
        await super().sleep(seconds)


def make_store(port: int, *pods: tuple[str, str], labels: dict[str, str] | None = None) -> Datastore:
    store = Datastore()
    store.set_pool(PoolSpec("pool", NS, parse_selector("app=vllm"), (port,)))
    for name, ip in pods:
        store.upsert_pod(PodInfo(name, NS, ip, labels={"app": "vllm", **(labels or {})}, ready=True))
    return store


def state(store: Datastore, pod: str) -> EndpointState:
    return next(s for s in store.endpoints() if s.endpoint.pod_name == pod)


def errors(metrics: EppMetrics, reason: str) -> float:
    return metrics.registry.get_sample_value("epp_scrape_errors_total", {"reason": reason}) or 0.0


def scrape_tasks() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("epp-scrape:") and not t.done()}


@contextlib.asynccontextmanager
async def running(scraper: ScrapersT) -> AsyncIterator[ScrapersT]:
    await scraper.start()
    try:
        yield scraper
    finally:
        await scraper.stop()


async def test_snapshots_follow_the_servers_on_the_injected_clock() -> None:
    clock = ManualClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2", "127.0.0.3") as (port, (s2, s3)):
        s3.body = render_vllm_metrics(VllmPage(waiting=1, running=2, kv_usage=0.125))
        store = make_store(port, ("a", "127.0.0.2"), ("b", "127.0.0.3"))
        async with running(ScraperManager(store, clock, metrics, phase=no_phase)):
            await wait_until(lambda: all(s.metrics.updated_at == clock.now() for s in store.endpoints()))
            a, b = state(store, "a").metrics, state(store, "b").metrics
            assert (a.waiting_queue, a.running, a.kv_cache_usage, a.max_adapters) == (3, 12, 0.4375, 4)
            assert (b.waiting_queue, b.running, b.kv_cache_usage) == (1, 2, 0.125)
            await wait_until(lambda: clock.sleepers == 2, message="both loops parked")
            assert (s2.hits, s3.hits) == (1, 1)  # nothing moves until the clock does
            s2.body = render_vllm_metrics(VllmPage(waiting=9))
            clock.advance(0.05)
            await wait_until(lambda: state(store, "a").metrics.waiting_queue == 9)
            assert state(store, "a").metrics.updated_at == clock.now()
    assert errors(metrics, "connect") == errors(metrics, "http") == errors(metrics, "parse") == 0
    assert (metrics.registry.get_sample_value("epp_scrape_duration_seconds_count", {"engine": "vllm"}) or 0) >= 3


async def test_dead_endpoint_backs_off_exponentially_up_to_the_cap_and_recovers() -> None:
    clock = RecordingClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2") as (port, _):
        store = make_store(port, ("live", "127.0.0.2"), ("dead", "127.0.0.4"))
        async with running(ScraperManager(store, clock, metrics, interval=0.05, max_backoff=1.0, phase=no_phase)):
            for step in range(1, 8):
                await wait_until(lambda: errors(metrics, "connect") == step and clock.sleepers == 2)  # noqa: B023
                clock.advance(1.0)  # every sleeper's deadline has passed: each loop polls once
            await wait_until(lambda: errors(metrics, "connect") == 8 and clock.sleepers == 2)
            assert clock.sleeps[f"epp-scrape:{NS}/dead-rank-0"] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
            assert clock.sleeps[f"epp-scrape:{NS}/live-rank-0"] == [0.05] * 8
            assert state(store, "live").metrics.updated_at == clock.now()
            # The server comes up: the next poll succeeds and the interval is back to normal.
            async with model_servers("127.0.0.4", port=port):
                clock.advance(1.0)
                await wait_until(lambda: state(store, "dead").metrics.updated_at == clock.now())
                await wait_until(lambda: clock.sleepers == 2)
                assert clock.sleeps[f"epp-scrape:{NS}/dead-rank-0"][-1] == 0.05
    assert state(store, "dead").metrics.waiting_queue == 3


async def test_hanging_endpoint_times_out_without_delaying_others() -> None:
    metrics = EppMetrics()
    async with model_servers("127.0.0.2", "127.0.0.3") as (port, (fast, slow)):
        slow.hang = True
        store = make_store(port, ("fast", "127.0.0.2"), ("slow", "127.0.0.3"))
        async with running(ScraperManager(store, SystemClock(), metrics, interval=0.01, timeout=1.0)):
            await wait_until(lambda: slow.hits == 1)
            await wait_until(lambda: fast.hits >= 10, timeout=5)
            # Ten fresh snapshots of the fast endpoint while the slow one still hangs.
            assert errors(metrics, "timeout") == 0
            await wait_until(lambda: errors(metrics, "timeout") == 1, timeout=5)
            assert state(store, "slow").metrics.updated_at == 0.0
            assert state(store, "fast").metrics.waiting_queue == 3


async def test_health_follows_scrapes_refused_unreachable_timeout_and_503_suspect_then_healthy() -> None:
    clock = ManualClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2", "127.0.0.3") as (port, (failing, hanging)):
        store = make_store(port, ("failing", "127.0.0.2"), ("hanging", "127.0.0.3"), ("dead", "127.0.0.4"))
        async with running(ScraperManager(store, clock, metrics, timeout=0.2, phase=no_phase)):
            await wait_until(lambda: state(store, "dead").health.state is Health.UNREACHABLE)
            await wait_until(lambda: clock.sleepers == 3)
            assert state(store, "failing").health.state is Health.HEALTHY
            failing.status = 503
            hanging.hang = True
            clock.advance(0.05)
            await wait_until(lambda: state(store, "failing").health.state is Health.SUSPECT)
            await wait_until(lambda: state(store, "hanging").health.state is Health.SUSPECT, timeout=5)
            assert "HTTP 503" in state(store, "failing").health.reason
            assert "timeout" in state(store, "hanging").health.reason
            failing.status = 200
            async with model_servers("127.0.0.4", port=port):
                for _ in range(8):  # past the failing ones' back-off
                    await wait_until(lambda: clock.sleepers == 3)
                    clock.advance(0.5)
                await wait_until(lambda: state(store, "dead").health.state is Health.HEALTHY)
                await wait_until(lambda: state(store, "failing").health.state is Health.HEALTHY)


async def test_removal_cancels_the_task_and_frees_the_endpoint() -> None:
    clock = ManualClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2", "127.0.0.3") as (port, (s2, _)):
        store = make_store(port, ("a", "127.0.0.2"), ("b", "127.0.0.3"))
        async with running(ScraperManager(store, clock, metrics)) as scraper:
            await wait_until(lambda: clock.sleepers == 2)
            assert scrape_tasks() == {f"epp-scrape:{NS}/a-rank-0", f"epp-scrape:{NS}/b-rank-0"}
            removed = state(store, "a")
            store.remove_pod(NS, "a")
            assert scraper.scraped == {f"{NS}/b-rank-0"}
            await wait_until(lambda: scrape_tasks() == {f"epp-scrape:{NS}/b-rank-0"})
            hits = s2.hits
            clock.advance(1.0)
            await wait_until(lambda: clock.sleepers == 1)
            assert s2.hits == hits and removed.metrics.updated_at == 1000.0
            # Added back: a new task, a new state.
            store.upsert_pod(PodInfo("a", NS, "127.0.0.2", labels={"app": "vllm"}, ready=True))
            await wait_until(lambda: state(store, "a").metrics.updated_at == clock.now())
            assert state(store, "a") is not removed


async def test_failures_keep_the_last_metrics_so_staleness_grows() -> None:
    clock = ManualClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2") as (port, (server,)):
        store = make_store(port, ("a", "127.0.0.2"))
        async with running(ScraperManager(store, clock, metrics)):
            await wait_until(lambda: state(store, "a").metrics.updated_at == clock.now())
            scraped_at = clock.now()
            server.status = 503
            for _ in range(3):
                await wait_until(lambda: clock.sleepers == 1)
                clock.advance(2.0)
            await wait_until(lambda: errors(metrics, "http") == 3)
            snap = state(store, "a").metrics
            assert snap.updated_at == scraped_at and snap.waiting_queue == 3
            assert snap.age(clock.now()) == pytest.approx(6.0)


async def test_parse_problems_partial_page_updates_garbage_page_does_not() -> None:
    clock = ManualClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2") as (port, (server,)):
        server.body = 'vllm:num_requests_waiting{m="x"} 6\nvllm:num_requests_running{m="x"} 2\n'
        store = make_store(port, ("a", "127.0.0.2"))
        async with running(ScraperManager(store, clock, metrics, phase=no_phase)):
            await wait_until(lambda: state(store, "a").metrics.updated_at == clock.now())
            assert state(store, "a").metrics.waiting_queue == 6
            assert errors(metrics, "parse") == 1  # KV usage missing: counted, fields that parsed applied
            scraped_at = clock.now()
            server.body = "<html>not metrics</html>"
            await wait_until(lambda: clock.sleepers == 1)
            clock.advance(0.05)
            await wait_until(lambda: errors(metrics, "parse") == 2)
            assert state(store, "a").metrics.updated_at == scraped_at
            assert state(store, "a").metrics.waiting_queue == 6


async def test_replaced_endpoint_gets_a_new_task_and_engine_label_selects_the_parser() -> None:
    clock = ManualClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2") as (port, (server,)):
        store = make_store(port, ("a", "127.0.0.2"))
        async with running(ScraperManager(store, clock, metrics)):
            await wait_until(lambda: state(store, "a").metrics.updated_at == clock.now())
            old = state(store, "a")
            server.body = "sglang:num_queue_reqs 4\nsglang:num_running_reqs 1\nsglang:token_usage 0.5\n"
            store.upsert_pod(
                PodInfo("a", NS, "127.0.0.2", labels={"app": "vllm", ENGINE_TYPE_LABEL: "sglang"}, ready=True)
            )
            new = state(store, "a")
            assert new is not old and new.metrics is old.metrics  # same address: metrics carried over
            await wait_until(lambda: new.metrics.waiting_queue == 4)
            assert (new.metrics.running, new.metrics.kv_cache_usage) == (1, 0.5)
            await wait_until(lambda: len(scrape_tasks()) == 1)
    assert metrics.registry.get_sample_value("epp_scrape_duration_seconds_count", {"engine": "sglang"}) == 1


async def test_start_scrapes_existing_endpoints_and_stop_cancels_all() -> None:
    clock = ManualClock()
    async with model_servers("127.0.0.2", "127.0.0.3") as (port, _):
        store = make_store(port, ("a", "127.0.0.2"), ("b", "127.0.0.3"))
        scraper = ScraperManager(store, clock, EppMetrics())
        await scraper.start()
        await scraper.start()  # idempotent
        await wait_until(lambda: clock.sleepers == 2)
        await scraper.stop()
        assert scrape_tasks() == set() and scraper.scraped == frozenset()
        store.upsert_pod(PodInfo("c", NS, "127.0.0.4", labels={"app": "vllm"}, ready=True))
        assert scrape_tasks() == set()  # no longer subscribed


async def test_ipv6_endpoint_url_is_bracketed() -> None:
    try:
        with socket.socket(socket.AF_INET6) as s:
            s.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    clock = ManualClock()
    async with model_servers("::1") as (port, _):
        store = make_store(port, ("v6", "::1"))
        async with running(ScraperManager(store, clock, EppMetrics())):
            await wait_until(lambda: state(store, "v6").metrics.updated_at == clock.now())


@pytest.mark.parametrize("kw", [{"interval": 0}, {"timeout": -1}, {"interval": 1.0, "max_backoff": 0.5}])
async def test_invalid_settings_are_rejected(kw: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="scrape"):
        ScraperManager(Datastore(), ManualClock(), EppMetrics(), **kw)  # type: ignore[arg-type]


def test_phases_are_stable_per_endpoint_and_spread_over_the_interval() -> None:
    phases = sorted(scrape_phase(f"{NS}/pod-{i}-rank-0", 0.05) for i in range(500))
    assert scrape_phase(f"{NS}/pod-1-rank-0", 0.05) == scrape_phase(f"{NS}/pod-1-rank-0", 0.05)
    assert phases[0] >= 0.0 and phases[-1] < 0.05
    # Evenly enough that no 5 ms slice of the interval holds much more than its tenth of the endpoints.
    assert max(sum(1 for p in phases if k * 0.005 <= p < (k + 1) * 0.005) for k in range(10)) < 80


async def test_first_wait_puts_the_endpoint_on_its_phase_then_polls_start_to_start() -> None:
    clock = RecordingClock()
    metrics = EppMetrics()
    async with model_servers("127.0.0.2") as (port, (server,)):
        store = make_store(port, ("slow", "127.0.0.2"))
        server.before_answer = lambda: clock.advance(0.02)  # each answer takes 20 ms of the clock's time
        async with running(ScraperManager(store, clock, metrics, interval=0.05)):
            for _ in range(3):
                await wait_until(lambda: clock.sleepers == 1)
                clock.advance(0.1)
            await wait_until(lambda: clock.sleepers == 1)
        sleeps = clock.sleeps[f"epp-scrape:{NS}/slow-rank-0"]
        # The answer's 20 ms come out of each wait (the interval runs start to start); the first
        # wait also moves the endpoint to its phase.
        assert sleeps[0] == round(0.05 + scrape_phase(f"{NS}/slow-rank-0", 0.05) - 0.02, 6)
        assert sleeps[1:] == [0.03] * 3
        assert state(store, "slow").metrics.scrape_interval == pytest.approx(0.12)  # 0.1 advanced + the 20 ms answer
    assert metrics.registry.get_sample_value("epp_scrape_interval_seconds_count", {"engine": "vllm"}) == 3
