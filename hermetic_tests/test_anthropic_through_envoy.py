"""Anthropic Messages through a real Envoy: parsed, model rewritten for the pod and back, usage read."""

from __future__ import annotations

import json

import aiohttp
from pool_modes import POOL

from epp_sim.kube_objects import model_rewrite
from epp_sim.modelserver.config import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.envoy import ext_proc_problems

SIM = SimConfig(lora_modules={"food-review-1": "/adapters/food-review-1"}, max_loras=2)


async def test_anthropic_stream_and_message_through_envoy(epp_pool: PoolFactory) -> None:
    objects = [model_rewrite("to-adapter", POOL, {"food-review-1": 1}, model="food-review", mode="v1")]
    env = await epp_pool("v1", pods=2, sim_config=SIM, objects=objects, envoy=True)
    body = {
        "model": "food-review",
        "max_tokens": 5,
        "system": "You review food.",
        "messages": [{"role": "user", "content": "best pizza?"}],
        "stream": True,
    }
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{env.envoy_url}/v1/messages", json=body) as resp:
            assert resp.status == 200
            assert resp.headers["content-type"].startswith("text/event-stream")
            text = (await resp.read()).decode()
        data = [json.loads(line[6:]) for line in text.splitlines() if line.startswith("data: ")]
        assert [d["type"] for d in data][-2:] == ["message_delta", "message_stop"]
        assert data[0]["message"]["model"] == "food-review"  # the served name went back to the client's
        (chosen,) = [sim for sim in env.servers if sim.stats()["requests"]]
        assert chosen.stats()["last_model"] == "food-review-1"  # the pod was sent the target model
        assert chosen.stats()["last_path"] == "/v1/messages"

        async with http.post(f"{env.envoy_url}/v1/messages", json={**body, "stream": False}) as resp:
            message = await resp.json()
            assert resp.status == 200, message
        assert message["model"] == "food-review" and message["usage"]["output_tokens"] == 5

        bad = {**body, "messages": []}
        async with http.post(f"{env.envoy_url}/v1/messages", json=bad) as resp:
            assert resp.status == 400
            assert "invalid messages request: must have at least one message" in await resp.text()

    labels = {"model_name": "food-review", "target_model_name": "food-review-1"}
    prompt = data[0]["message"]["usage"]["input_tokens"]
    assert env.sample("inference_objective_output_tokens_sum", **labels) == 10  # both answers' usage was read
    assert env.sample("inference_objective_input_tokens_sum", **labels) == 2 * prompt
    assert ext_proc_problems(await env.envoy.counters()) == {}
