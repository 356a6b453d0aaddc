"""``--metrics-scrape-process``: the scrape worker child feeds the picker's routing, through a real Envoy."""

from __future__ import annotations

import os
import signal

import aiohttp

from epp.datalayer.scrape_process import ScrapeProcess
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.waits import wait_until

MODEL = SimConfig().model


async def _served_by(env: object, http: aiohttp.ClientSession, url: str, count: int) -> list[int]:
    """POST ``count`` completions through Envoy; how many each pod served, in pod order."""
    before = [sim.stats()["requests"] for sim in env.servers]  # type: ignore[attr-defined]
    for i in range(count):
        body = {"model": MODEL, "prompt": f"question {i}", "max_tokens": 1}
        async with http.post(f"{url}/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
    return [sim.stats()["requests"] - b for sim, b in zip(env.servers, before, strict=True)]  # type: ignore[attr-defined]


async def test_routing_follows_metrics_scraped_by_the_worker_and_survives_its_death(epp_pool: PoolFactory) -> None:
    env = await epp_pool("v1", pods=3, envoy=True, picker_args=["--metrics-scrape-process"])
    scrapers = env.runtime.pools[0].scrapers
    assert isinstance(scrapers, ScrapeProcess)
    first = scrapers.pid
    assert first is not None and first != os.getpid()
    async with aiohttp.ClientSession() as http:
        await env.set_pins([{"waiting": 9}, {"waiting": 0, "kv_cache_usage": 0.1}, {"waiting": 9}])
        assert await _served_by(env, http, env.envoy_url, 4) == [0, 4, 0]
        os.kill(first, signal.SIGKILL)  # the worker dies: said, replaced, given every endpoint
        await wait_until(lambda: scrapers.pid not in (None, first), timeout=10)
        assert env.sample("epp_scrape_worker_restarts_total") == 1
        await env.set_pins([{"waiting": 9}, {"waiting": 9}, {"waiting": 0, "kv_cache_usage": 0.1}])
        assert await _served_by(env, http, env.envoy_url, 4) == [0, 0, 4]
    assert env.sample("epp_scrape_duration_seconds_count", engine="vllm") > 0
    assert env.sample("epp_scrape_interval_seconds_count", engine="vllm") > 0
