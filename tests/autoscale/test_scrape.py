"""Direct scraping of simulated vLLM servers: the V1 pair, the V2 inputs, data-parallel ranks, health, idleness."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from epp.autoscale.inputs import PodTarget
from epp.autoscale.scrape import ScrapeSource
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import ManualClock
from epp.framework.health import Health
from epp_sim.modelserver.config import SimConfig
from epp_sim.modelserver.fixture import model_servers

KEY = ModelKey("ns", "llama")


def _v1(readings: list[ReplicaMetrics]) -> dict[str, tuple[float, float]]:
    return {r.key: (r.kv_cache_usage, r.queue_length) for r in readings}


async def test_scrape_reads_kv_queue_and_capacity_and_skips_dead_pods(session: aiohttp.ClientSession) -> None:
    clock = ManualClock()
    source = ScrapeSource(session, clock, timeout=1.0)
    config = SimConfig(model="llama", num_gpu_blocks=500, block_size=16, max_model_len=2048)
    async with model_servers(2, start=210, config=config) as servers:
        servers[0].pin(waiting=6, kv_cache_usage=0.85)
        servers[1].pin(waiting=0, kv_cache_usage=0.25)
        pods = [PodTarget("ns", f"p{i}", s.host, s.port) for i, s in enumerate(servers)]
        dead = PodTarget("ns", "dead", "127.0.0.213", 1)  # nothing listens there
        readings = await source.collect(KEY, [*pods, dead])
    assert _v1(readings) == {"p0": (0.85, 6.0), "p1": (0.25, 0.0)}
    assert {r.tokens_capacity for r in readings} == {8000}  # vllm:cache_config_info: 500 blocks × 16
    assert readings[0].tokens_in_use == 6800
    assert source.health(KEY, "dead") is Health.UNREACHABLE and source.health(KEY, "p0") is Health.HEALTHY


async def test_scrape_turns_counters_into_the_workload_shape_and_rates(session: aiohttp.ClientSession) -> None:
    clock = ManualClock()
    source = ScrapeSource(session, clock)
    async with model_servers(1, start=218, config=SimConfig(model="llama")) as [server]:
        pod = [PodTarget("ns", "p0", server.host, server.port)]
        [first] = await source.collect(KEY, pod)
        assert (first.avg_input_tokens, first.avg_output_tokens, first.request_rate) == (0.0, 0.0, 0.0)  # one sample
        for _ in range(3):
            body = {"model": "llama", "prompt": "one two three four five six seven eight", "max_tokens": 5}
            async with session.post(f"{server.url}/v1/completions", json=body) as resp:
                assert resp.status == 200
        clock.advance(30)
        [second] = await source.collect(KEY, pod)
    assert second.avg_output_tokens == 5.0  # Δ generation tokens sum / Δ count over the 5 m window
    assert second.avg_input_tokens > 1
    assert second.request_rate == pytest.approx(3 / 30)  # completed requests per second over 1 m
    assert second.generation_rate == pytest.approx(15 / 30)
    assert second.avg_itl > 0


_DP_PAGE = """\
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="llama"} 2.0
vllm:num_requests_waiting{engine="1",model_name="llama"} 7.0
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="llama"} 1.0
vllm:num_requests_running{engine="1",model_name="llama"} 3.0
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="llama"} 0.2
vllm:kv_cache_usage_perc{engine="1",model_name="llama"} 0.9
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0
"""


async def test_a_data_parallel_pod_is_one_reading_per_rank(session: aiohttp.ClientSession) -> None:
    """A vLLM with two DP ranks behind one API server labels its series engine="0"/"1" (no GPU here)."""

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=_DP_PAGE)

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.219", 0)
    await site.start()
    try:
        source = ScrapeSource(session, ManualClock())
        readings = await source.collect(KEY, [PodTarget("ns", "dp", "127.0.0.219", runner.addresses[0][1])])
    finally:
        await runner.cleanup()
    assert _v1(readings) == {"dp:0": (0.2, 2.0), "dp:1": (0.9, 7.0)}
    assert {r.pod for r in readings} == {"dp"} and {r.tokens_capacity for r in readings} == {16000}


async def test_scrape_reads_the_pickers_health_a_pod_that_keeps_falling_is_held_out(
    session: aiohttp.ClientSession,
) -> None:
    clock = ManualClock()
    source = ScrapeSource(session, clock, timeout=1.0)
    async with model_servers(1, start=216, config=SimConfig(model="llama")) as [server]:
        pod = PodTarget("ns", "p0", server.host, server.port)
        port = server.port
        assert [r.pod for r in await source.collect(KEY, [pod])] == ["p0"]
        await server.stop()
        assert await source.collect(KEY, [pod]) == [] and source.health(KEY, "p0") is Health.UNREACHABLE
        async with model_servers(1, start=216, port=port, config=SimConfig(model="llama")):
            assert [r.pod for r in await source.collect(KEY, [pod])] == ["p0"]  # first fall: back at once
        assert await source.collect(KEY, [pod]) == []
        async with model_servers(1, start=216, port=port, config=SimConfig(model="llama")):
            assert await source.collect(KEY, [pod]) == []  # second fall in a row: held out for 1 s
            assert source.health(KEY, "p0") is Health.EJECTED
            clock.advance(1.0)
            assert [r.pod for r in await source.collect(KEY, [pod])] == ["p0"]
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
    assert await source.model_signals(KEY) is None  # the pickers' own pages say that


_SGLANG_PAGE = """\
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="llama"} 3.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="llama"} 5.0
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="llama"} 0.4
# TYPE sglang:max_total_num_tokens gauge
sglang:max_total_num_tokens{model_name="llama"} 50000.0
# TYPE sglang:generation_tokens_histogram histogram
sglang:generation_tokens_histogram_sum{model_name="llama"} %d
sglang:generation_tokens_histogram_count{model_name="llama"} %d
"""


async def test_an_sglang_pod_is_read_with_sglangs_names(session: aiohttp.ClientSession) -> None:
    pages = iter([_SGLANG_PAGE % (1000, 10), _SGLANG_PAGE % (1600, 12)])

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(text=next(pages))

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.220", 0).start()
    clock = ManualClock()
    source = ScrapeSource(session, clock)
    pod = PodTarget("ns", "sg", "127.0.0.220", runner.addresses[0][1], engine="sglang")
    try:
        await source.collect(KEY, [pod])
        clock.advance(30)
        [reading] = await source.collect(KEY, [pod])
    finally:
        await runner.cleanup()
    assert (reading.kv_cache_usage, reading.queue_length, reading.tokens_capacity) == (0.4, 3.0, 50000)
    assert reading.avg_output_tokens == 300.0  # (1600 − 1000) / (12 − 10)
