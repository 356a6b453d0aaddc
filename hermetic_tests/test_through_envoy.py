"""Through a real Envoy: the picker's choice is the simulator that serves, end to end over HTTP."""

from __future__ import annotations

import time

import aiohttp
import pytest
from pool_modes import CRD_MODES, POOL, served

from epp_sim.kube_objects import PoolMode, inference_objective, model_rewrite
from epp_sim.modelserver.config import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.envoy import ext_proc_problems
from epp_sim.stack.hermetic import HermeticPool

# Slow decode so a streamed answer takes visibly longer than its first chunk.
SIM = SimConfig(lora_modules={"food-review-1": "/adapters/food-review-1"}, max_loras=2, decode_time_base=0.05)


def served_by(env: HermeticPool) -> list[int]:
    """Indexes of the simulators that have served at least one request."""
    return [i for i, sim in enumerate(env.servers) if sim.stats()["requests"]]


@pytest.mark.parametrize("mode", CRD_MODES)  # the rewrite and the sheddable objective are CRD objects
async def test_through_envoy_rewrite_sse_shed_and_picker_down(epp_pool: PoolFactory, mode: PoolMode) -> None:
    objects = [
        model_rewrite("to-adapter", POOL, {"food-review-1": 1}, model="food-review", mode=mode),
        inference_objective("sheddable", -1, POOL, mode=mode),
        *served(mode, "food-review-1", "m"),
    ]
    env = await epp_pool(mode, pods=3, sim_config=SIM, objects=objects, envoy=True)
    async with aiohttp.ClientSession() as http:
        url = f"{env.envoy_url}/v1/chat/completions"
        chat = {"model": "food-review", "messages": [{"role": "user", "content": "best pizza?"}], "max_tokens": 4}
        async with http.post(url, json=chat) as resp:
            answer = await resp.json()
            assert resp.status == 200, answer
        assert answer["model"] == "food-review"  # rewritten back for the client
        (chosen,) = served_by(env)
        stats = env.servers[chosen].stats()
        assert stats["last_model"] == "food-review-1"  # the simulator was sent the target model
        assert stats["last_headers"]["x-gateway-destination-endpoint"] == env.hostport(chosen)

        stream = {**chat, "stream": True, "max_tokens": 12, "stream_options": {"include_usage": True}}
        arrivals: list[float] = []
        events: list[bytes] = []
        async with http.post(url, json=stream) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            async for line in resp.content:
                if line.startswith(b"data: "):
                    arrivals.append(time.monotonic())
                    events.append(line)
        assert events[-1].strip() == b"data: [DONE]"
        assert any(b'"usage"' in e for e in events)
        # 12 tokens at >= 50 ms a step: chunks must arrive spread out, not as one buffered blob.
        assert arrivals[-1] - arrivals[0] > 0.3

        for sim in env.servers:
            sim.pin(waiting=9, kv_cache_usage=0.95)
        await env.wait_scraped([{"waiting": 9, "kv_cache_usage": 0.95}] * 3)
        shed_request = {"model": "m", "prompt": "p"}
        headers = {"x-gateway-inference-objective": "sheddable"}
        async with http.post(url.replace("chat/", ""), json=shed_request, headers=headers) as resp:
            assert resp.status == 429
            assert (
                await resp.text() == "inference error: ResourceExhausted - system saturated, sheddable request dropped"
            )

        assert ext_proc_problems(await env.envoy.counters()) == {}  # Envoy saw a clean exchange, shed included

        await env.runtime.server.stop(0)  # the picker goes away; Envoy fails closed
        async with http.post(url, json=chat) as resp:
            assert resp.status == 500
