"""Inputs: direct scraping of simulated vLLM servers, and upstream PromQL against a fake Prometheus."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from epp.autoscale.inputs import InputError, PodTarget, PrometheusSource, ScrapeSource
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import ManualClock
from epp.framework.health import Health
from epp_sim.modelserver.config import SimConfig
from epp_sim.modelserver.fixture import model_servers

KEY = ModelKey("ns", "llama")


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


async def test_scrape_reads_kv_and_queue_and_skips_dead_pods(session: aiohttp.ClientSession) -> None:
    clock = ManualClock()
    source = ScrapeSource(session, clock, timeout=1.0)
    async with model_servers(2, start=210, config=SimConfig(model="llama")) as servers:
        servers[0].pin(waiting=6, kv_cache_usage=0.85)
        servers[1].pin(waiting=0, kv_cache_usage=0.25)
        pods = [PodTarget("ns", f"p{i}", s.host, s.port) for i, s in enumerate(servers)]
        dead = PodTarget("ns", "dead", "127.0.0.213", 1)  # nothing listens there
        readings = await source.collect(KEY, [*pods, dead])
    assert readings == {
        "p0": ReplicaMetrics("p0", 0.85, 6.0),
        "p1": ReplicaMetrics("p1", 0.25, 0.0),
    }
    assert source.health(KEY, "dead") is Health.UNREACHABLE and source.health(KEY, "p0") is Health.HEALTHY


async def test_scrape_reads_the_pickers_health_a_pod_that_keeps_falling_is_held_out(
    session: aiohttp.ClientSession,
) -> None:
    clock = ManualClock()
    source = ScrapeSource(session, clock, timeout=1.0)
    async with model_servers(1, start=216, config=SimConfig(model="llama")) as [server]:
        pod = PodTarget("ns", "p0", server.host, server.port)
        port = server.port
        assert set(await source.collect(KEY, [pod])) == {"p0"}
        await server.stop()
        assert await source.collect(KEY, [pod]) == {} and source.health(KEY, "p0") is Health.UNREACHABLE
        async with model_servers(1, start=216, port=port, config=SimConfig(model="llama")):
            assert set(await source.collect(KEY, [pod])) == {"p0"}  # first fall: back at once
        assert await source.collect(KEY, [pod]) == {}
        async with model_servers(1, start=216, port=port, config=SimConfig(model="llama")):
            assert await source.collect(KEY, [pod]) == {}  # second fall in a row: held out for 1 s
            assert source.health(KEY, "p0") is Health.EJECTED
            clock.advance(1.0)
            assert set(await source.collect(KEY, [pod])) == {"p0"}
    await source.collect(KEY, [])
    assert source.health(KEY, "p0") is None  # a pod no longer asked about is forgotten


async def test_scrape_idle_needs_a_full_window_of_evidence(session: aiohttp.ClientSession) -> None:
    clock = ManualClock()
    source = ScrapeSource(session, clock)
    async with model_servers(1, start=214, config=SimConfig(model="llama")) as [server]:
        pods = [PodTarget("ns", "p0", server.host, server.port)]
        server.pin(waiting=0, running=0)
        await source.collect(KEY, pods)
        assert await source.idle(KEY, pods, 120) is None  # watched for 0 s: unknown
        clock.advance(60)
        await source.collect(KEY, pods)
        assert await source.idle(KEY, pods, 120) is None
        clock.advance(60)
        await source.collect(KEY, pods)
        assert await source.idle(KEY, pods, 120) is True
        # a request that finished between two scrapes shows only in vllm:request_success_total
        body = {"model": "llama", "prompt": "hi", "max_tokens": 1}
        async with session.post(f"{server.url}/v1/completions", json=body) as resp:
            assert resp.status == 200
        clock.advance(30)
        await source.collect(KEY, pods)
        assert await source.idle(KEY, pods, 120) is False
        clock.advance(120)
        await source.collect(KEY, pods)
        assert await source.idle(KEY, pods, 120) is True
        server.pin(running=2)
        clock.advance(30)
        await source.collect(KEY, pods)
        assert await source.idle(KEY, pods, 120) is False
        assert await source.idle(ModelKey("other", "llama"), pods, 120) is None


def _prometheus(responses: dict[str, Any], seen: list[str]) -> web.Application:
    async def query(request: web.Request) -> web.Response:
        q = request.query["query"]
        seen.append(q)
        for needle, body in responses.items():
            if needle in q:
                return web.json_response(body)
        return web.json_response({"status": "error", "error": "unexpected query"}, status=400)

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    return app


def _vector(*series: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [1.0, v]} for m, v in series]},
    }


@pytest.fixture
async def prometheus() -> AsyncIterator[tuple[str, dict[str, Any], list[str]]]:
    responses: dict[str, Any] = {}
    seen: list[str] = []
    runner = web.AppRunner(_prometheus(responses, seen))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/", responses, seen
    finally:
        await runner.cleanup()


async def test_prometheus_upstream_queries_and_mapping(
    session: aiohttp.ClientSession, prometheus: tuple[str, dict[str, Any], list[str]]
) -> None:
    url, responses, seen = prometheus
    responses["kv_cache_usage_perc"] = _vector(
        ({"pod": "a"}, "0.5"), ({"pod_name": "b"}, "NaN"), ({"pod": "stale"}, "0.9")
    )
    responses["num_requests_waiting"] = _vector(({"pod": "a"}, "3.7"), ({"pod": "c"}, "+Inf"), ({}, "9"))
    source = PrometheusSource(session, url)
    key = ModelKey('team"a', "meta/llama\\3")
    pods = [PodTarget(key.namespace, n, "", 0) for n in ("a", "b", "c")]
    readings = await source.collect(key, pods)
    assert readings == {
        "a": ReplicaMetrics("a", 0.5, 3.0),  # queue truncated to int
        "b": ReplicaMetrics("b", 0.0, 0.0),  # NaN → 0; missing queue → 0
        "c": ReplicaMetrics("c", 0.0, 0.0),  # +Inf → 0; missing KV → 0
    }  # "stale" is not one of the controller's pods: dropped
    assert (
        'max by (pod) (max_over_time(vllm:kv_cache_usage_perc{namespace="team\\"a",model_name="meta/llama\\\\3"}[1m]))'
        in seen
    )


async def test_prometheus_errors_and_idle(
    session: aiohttp.ClientSession, prometheus: tuple[str, dict[str, Any], list[str]]
) -> None:
    url, responses, seen = prometheus
    source = PrometheusSource(session, url)
    with pytest.raises(InputError, match="unexpected query"):
        await source.collect(KEY, [])
    assert await source.idle(KEY, [], 600) is None  # error → unknown, never idle
    responses["request_success_total"] = _vector(({}, "0"))
    assert await source.idle(KEY, [], 600) is True
    assert seen[-1] == 'sum(increase(vllm:request_success_total{namespace="ns",model_name="llama"}[600s]))'
    responses["request_success_total"] = _vector(({}, "4"))
    assert await source.idle(KEY, [], 600) is False
    responses["request_success_total"] = _vector()
    assert await source.idle(KEY, [], 600) is None  # no data → unknown


async def test_prometheus_unreachable(session: aiohttp.ClientSession) -> None:
    source = PrometheusSource(session, "http://127.0.0.1:1", timeout=1.0)
    with pytest.raises(InputError, match="failed"):
        await source.collect(KEY, [])
