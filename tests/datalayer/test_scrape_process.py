"""ScrapeProcess: the scrape worker child against real aiohttp model servers on loopback, as ``epp serve`` runs it."""

from __future__ import annotations

import asyncio
import os
import signal
from types import MappingProxyType

import pytest
from test_scraper import errors, make_store, model_servers, running, state
from vllm_metrics_fixture import VllmPage, render_vllm_metrics

from epp.clock import SystemClock
from epp.datalayer.scrape_process import ScrapeProcess
from epp.datalayer.scrape_wire import Batch, dumps, read_frame
from epp.datastore.types import PodInfo
from epp.framework.datalayer import MetricsSourceSpec
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.health import Health
from epp.telemetry.metrics import EppMetrics
from epp_sim.waits import wait_until

NS = "llm"


def sample(metrics: EppMetrics, name: str, **labels: str) -> float:
    return metrics.registry.get_sample_value(name, labels) or 0.0


async def test_snapshots_health_and_metrics_come_back_from_the_worker() -> None:
    metrics = EppMetrics()
    async with model_servers("127.0.0.2", "127.0.0.3") as (port, (a, b)):
        b.body = render_vllm_metrics(VllmPage(waiting=1, running=2, kv_usage=0.125))
        store = make_store(port, ("a", "127.0.0.2"), ("b", "127.0.0.3"), ("dead", "127.0.0.4"))
        async with running(ScrapeProcess(store, SystemClock(), metrics, interval=0.05)) as scraper:
            assert scraper.pid is not None and scraper.pid != os.getpid()
            await wait_until(lambda: state(store, "b").metrics.waiting_queue == 1)
            snap = state(store, "b").metrics
            assert (snap.running, snap.kv_cache_usage) == (2, 0.125)
            assert state(store, "a").metrics.waiting_queue == 3
            await wait_until(lambda: state(store, "dead").health.state is Health.UNREACHABLE)
            a.body = render_vllm_metrics(VllmPage(waiting=9))
            await wait_until(lambda: state(store, "a").metrics.waiting_queue == 9)
            await wait_until(lambda: 0.03 < state(store, "a").metrics.scrape_interval < 0.5)
            await wait_until(lambda: sample(metrics, "epp_scrape_duration_seconds_count", engine="vllm") >= 10)
            await wait_until(lambda: sample(metrics, "epp_scrape_interval_seconds_count", engine="vllm") >= 5)
            await wait_until(lambda: errors(metrics, "connect") >= 1)
            # An endpoint that stops answering well turns suspect, as in process.
            a.status = 503
            await wait_until(lambda: state(store, "a").health.state is Health.SUSPECT)
            assert "HTTP 503" in state(store, "a").health.reason
            assert scraper.scraped == {f"{NS}/a-rank-0", f"{NS}/b-rank-0", f"{NS}/dead-rank-0"}
        assert scraper.pid is None


async def test_removed_and_replaced_endpoints_follow_the_datastore() -> None:
    metrics = EppMetrics()
    async with model_servers("127.0.0.2", "127.0.0.3") as (port, (a, b)):
        b.body = render_vllm_metrics(VllmPage(waiting=5))
        store = make_store(port, ("a", "127.0.0.2"), ("gone", "127.0.0.3"))
        async with running(ScrapeProcess(store, SystemClock(), metrics)) as scraper:
            await wait_until(lambda: state(store, "gone").metrics.waiting_queue == 5)
            store.remove_pod(NS, "gone")
            assert scraper.scraped == {f"{NS}/a-rank-0"}
            hits = b.hits
            await wait_until(lambda: a.hits >= hits + 5)
            assert b.hits <= hits + 1  # at most one poll already under way when the removal arrived
            # The same pod moves to the other server: its new state is fed from there, never from the old one.
            store.upsert_pod(PodInfo("a", NS, "127.0.0.3", labels={"app": "vllm"}, ready=True))
            await wait_until(lambda: state(store, "a").metrics.waiting_queue == 5)


async def test_a_dead_worker_is_said_and_replaced_and_given_every_endpoint() -> None:
    metrics = EppMetrics()
    async with model_servers("127.0.0.2") as (port, (server,)):
        store = make_store(port, ("a", "127.0.0.2"))
        async with running(ScrapeProcess(store, SystemClock(), metrics, restart_delay=0.05)) as scraper:
            await wait_until(lambda: state(store, "a").metrics.updated_at > 0)
            first = scraper.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)
            await wait_until(lambda: scraper.pid not in (None, first))
            assert sample(metrics, "epp_scrape_worker_restarts_total") == 1
            server.body = render_vllm_metrics(VllmPage(waiting=7))
            await wait_until(lambda: state(store, "a").metrics.waiting_queue == 7)


async def test_a_reload_reaches_the_worker() -> None:
    metrics = EppMetrics()
    async with model_servers("127.0.0.2") as (port, (server,)):
        store = make_store(port, ("a", "127.0.0.2"))
        async with running(ScrapeProcess(store, SystemClock(), metrics)) as scraper:
            await wait_until(lambda: server.hits > 0)
            scraper.apply(scraper_spec(path="/elsewhere"))  # the server answers 404 there
            await wait_until(lambda: errors(metrics, "http") >= 1)
            assert state(store, "a").health.state is Health.SUSPECT


def scraper_spec(*, path: str) -> object:
    from epp.config.options import ModelServerMetricsOptions
    from epp.datalayer.scrape_spec import build_scrape_spec

    return build_scrape_spec(MetricsSourceSpec(path=path), None, ModelServerMetricsOptions())


async def test_frames_carry_read_only_mappings_and_refuse_garbage() -> None:
    snapshot = MetricsSnapshot(waiting_queue=2, custom=MappingProxyType({"x": 1.5}))
    reader = asyncio.StreamReader()
    reader.feed_data(dumps(("batch", Batch(snapshots={7: snapshot}))))
    reader.feed_data(b"\0\0\0\x05abcde")
    reader.feed_eof()
    message = await read_frame(reader)
    assert message is not None and message[1].snapshots[7] == snapshot
    assert message[1].snapshots[7].custom["x"] == 1.5
    with pytest.raises(Exception):  # noqa: B017, PT011 - whatever unpickling raises for garbage
        await read_frame(reader)
    truncated = asyncio.StreamReader()
    truncated.feed_data(b"\0\0\0\x09ab")
    truncated.feed_eof()
    with pytest.raises(ValueError, match="inside a frame"):
        await read_frame(truncated)
    huge = asyncio.StreamReader()
    huge.feed_data(b"\xff\xff\xff\xff")
    with pytest.raises(ValueError, match="over"):
        await read_frame(huge)
