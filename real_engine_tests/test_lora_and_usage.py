"""Through the real Envoy to real vLLM: LoRA affinity with a real adapter, and usage counted from real answers.

Affinity: the second server has the adapter running (a long request straight to it), the first
is idle; every adapter request sent through Envoy lands on the second, where the adapter is
active (lora-affinity-scorer), and which server served each one is read from vLLM's own request
counters. Usage: a JSON answer and an SSE stream with ``stream_options.include_usage`` go through
Envoy, and the picker's token histograms grow by exactly the usage vLLM reported.
"""

from __future__ import annotations

import json

import aiohttp
from engine_load import busy, served_requests

from epp_sim.pytest_plugin import VllmPoolFactory
from epp_sim.realengine.servers import MODEL
from epp_sim.waits import wait_until

AFFINE = 4


async def test_adapter_requests_follow_the_server_running_the_adapter(
    epp_vllm_pool: VllmPoolFactory, adapter_on_second: str
) -> None:
    pool = await epp_vllm_pool()
    first, second = pool.servers
    body = {"model": adapter_on_second, "prompt": "Write SQL for the top customers", "max_tokens": 2}
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http,
        busy(second, requests=1, max_tokens=400, model=adapter_on_second),
    ):
        await wait_until(
            lambda: adapter_on_second in pool.state(second).metrics.active_adapters,
            timeout=60,
            message="the picker saw the adapter running on the second server",
        )
        assert adapter_on_second not in pool.state(first).metrics.active_adapters
        for _ in range(AFFINE):
            before = [await served_requests(http, s) for s in pool.servers]
            async with http.post(f"{pool.envoy_url}/v1/completions", json=body) as resp:
                answer = await resp.json()
                assert resp.status == 200, answer
            assert answer["model"] == adapter_on_second
            after = [await served_requests(http, s) for s in pool.servers]
            assert [b - a for a, b in zip(before, after, strict=True)] == [0, 1]  # served by the second


async def test_usage_from_json_and_sse_answers_is_counted(epp_vllm_pool: VllmPoolFactory) -> None:
    pool = await epp_vllm_pool()
    labels = {"model_name": MODEL, "target_model_name": MODEL}

    def tokens() -> tuple[float, float, float]:
        return (
            pool.sample("inference_objective_input_tokens_sum", **labels),
            pool.sample("inference_objective_output_tokens_sum", **labels),
            pool.sample("inference_objective_input_tokens_count", **labels),
        )

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        start = tokens()
        body = {"model": MODEL, "prompt": "Count to five:", "max_tokens": 5}
        async with http.post(f"{pool.envoy_url}/v1/completions", json=body) as resp:
            assert resp.status == 200
            plain = (await resp.json())["usage"]
        await wait_until(lambda: tokens()[2] == start[2] + 1, timeout=10, message="the JSON answer's usage counted")
        assert tokens()[:2] == (start[0] + plain["prompt_tokens"], start[1] + plain["completion_tokens"])

        chat = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Name three colours."}],
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        middle = tokens()
        async with http.post(f"{pool.envoy_url}/v1/chat/completions", json=chat) as resp:
            assert resp.status == 200 and resp.headers["content-type"].startswith("text/event-stream")
            events = [line for line in (await resp.text()).split("\n\n") if line]
        assert events[-1] == "data: [DONE]"
        streamed = json.loads(events[-2].removeprefix("data: "))["usage"]  # the usage chunk, before [DONE]
        assert streamed["completion_tokens"] == 6
        await wait_until(lambda: tokens()[2] == middle[2] + 1, timeout=10, message="the stream's usage counted")
        assert tokens()[:2] == (middle[0] + streamed["prompt_tokens"], middle[1] + streamed["completion_tokens"])
