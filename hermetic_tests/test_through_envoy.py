"""Through a real Envoy: the picker's choice is the simulator that serves, end to end over HTTP."""

from __future__ import annotations

import time

import aiohttp
from harness import POOL, Env, hermetic

from epp_sim.modelserver.config import SimConfig
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap

REWRITE = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
    "kind": "InferenceModelRewrite",
    "metadata": {"name": "to-adapter", "namespace": "default"},
    "spec": {
        "poolRef": {"name": POOL},
        "rules": [
            {
                "matches": [{"model": {"type": "Exact", "value": "food-review"}}],
                "targets": [{"modelRewrite": "food-review-1", "weight": 1}],
            }
        ],
    },
}
SHEDDABLE = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
    "kind": "InferenceObjective",
    "metadata": {"name": "sheddable", "namespace": "default"},
    "spec": {"priority": -1, "poolRef": {"name": POOL}},
}
# Slow decode so a streamed answer takes visibly longer than its first chunk.
SIM = SimConfig(lora_modules={"food-review-1": "/adapters/food-review-1"}, max_loras=2, decode_time_base=0.05)


def served_by(env: Env) -> list[int]:
    """Indexes of the simulators that have served at least one request."""
    return [i for i, sim in enumerate(env.sims) if sim.stats()["requests"]]


async def test_through_envoy_rewrite_sse_shed_and_picker_down() -> None:
    async with hermetic("v1", pods=3, sim_config=SIM, objects=[REWRITE, SHEDDABLE]) as env:
        bootstrap = envoy_bootstrap(
            listen_port=0, ext_proc=ExtProcTarget("127.0.0.1", env.runtime.ports.grpc), admin_port=0
        )
        async with EnvoyProcess(bootstrap) as envoy, aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{envoy.port}/v1/chat/completions"
            chat = {"model": "food-review", "messages": [{"role": "user", "content": "best pizza?"}], "max_tokens": 4}
            async with http.post(url, json=chat) as resp:
                answer = await resp.json()
                assert resp.status == 200, answer
            assert answer["model"] == "food-review"  # rewritten back for the client
            (chosen,) = served_by(env)
            stats = env.sims[chosen].stats()
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

            for sim in env.sims:
                sim.pin(waiting=9, kv_cache_usage=0.95)
            await env.wait_scraped([{"waiting": 9, "kv_cache_usage": 0.95}] * 3)
            shed_request = {"model": "m", "prompt": "p"}
            headers = {"x-gateway-inference-objective": "sheddable"}
            async with http.post(url.replace("chat/", ""), json=shed_request, headers=headers) as resp:
                assert resp.status == 429
                assert (
                    await resp.text()
                    == "inference error: ResourceExhausted - system saturated, sheddable request dropped"
                )

            await env.runtime.server.stop(0)  # the picker goes away; Envoy fails closed
            async with http.post(url, json=chat) as resp:
                assert resp.status == 500
