"""SLO-aware routing on real vLLM: the embedded predictor learns the engine's own timings from what Envoy relays.

Streaming chat requests with objectives in ``x-llm-d-slo-*`` go through the real Envoy to the
two vLLM servers, one at a time; the client times each one's first body byte. Every response
is a sample (TTFT from the routing answer to the first byte, TPOT from the stream's end and
vLLM's ``usage``); training runs on the predictor's worker thread, and then Explain shows a
predicted TTFT per server of the same order as the TTFTs the client measured: a model of this
engine, not of the simulator.
"""

from __future__ import annotations

import json
import time

import aiohttp
import grpc

from epp.api import pb
from epp_sim.pytest_plugin import VllmPoolFactory
from epp_sim.realengine.servers import MODEL
from epp_sim.waits import wait_until

PRODUCER = "predicted-latency-producer"
# One profile, built from the plugins as listed (no schedulingProfiles needed).
CONFIG = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- {type: predicted-latency-producer, parameters: {streamingMode: true, predictor: {embedded: {retrainInterval: 200ms}}}}
- {type: slo-headroom-tier-filter}
- {type: latency-scorer}
- {type: max-score-picker}
"""
SLO = {"x-llm-d-slo-ttft-ms": "5000", "x-llm-d-slo-tpot-ms": "2000"}
REQUESTS = 16


def _chat(i: int) -> dict[str, object]:
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Question {i}: name {2 + i % 5} animals. " * (1 + i % 4)}],
        "max_tokens": 4 + i % 5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def _ttft(http: aiohttp.ClientSession, url: str, body: dict[str, object]) -> float:
    """Send one streaming request through Envoy; the seconds until its first body byte, read to the end."""
    start = time.perf_counter()
    async with http.post(f"{url}/v1/chat/completions", json=body, headers=SLO) as resp:
        assert resp.status == 200, await resp.text()
        await resp.content.readany()
        first = time.perf_counter() - start
        await resp.read()
    return first


async def test_the_embedded_predictor_learns_vllms_timings(epp_vllm_pool: VllmPoolFactory) -> None:
    pool = await epp_vllm_pool(picker_args=["--config-text", CONFIG])
    predictor = pool.runtime.pools[0].routing.config.plugins[PRODUCER].predictor  # type: ignore[attr-defined]
    measured = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
        for i in range(REQUESTS):
            measured.append(await _ttft(http, pool.envoy_url, _chat(i)))
    await wait_until(
        lambda: predictor.stats.observations["ttft"] >= REQUESTS and predictor.stats.observations["tpot"] >= REQUESTS,
        timeout=30,
        message="every relayed response observed (TTFT and TPOT)",
    )
    await wait_until(lambda: predictor.stats.model_ready, timeout=60, message="a model trained on vLLM's timings")
    assert predictor.stats.training_thread.startswith("epp-latency-train")

    async with grpc.aio.insecure_channel(pool.picker.health_target) as channel:
        request = pb.ExplainRequest(
            headers={":path": "/v1/chat/completions", **SLO}, body=json.dumps(_chat(0)).encode()
        )
        answer = await pb.ExplainStub(channel).Explain(request, timeout=30)
    (latency,) = answer.latency
    assert {e.address for e in latency.endpoints} == {s.hostport for s in pool.servers}
    # The picker's TTFT starts at its routing answer, the client's before Envoy asked it: the p90
    # model of an idle server lies within the span the client measured (with room for both ends).
    low, high = min(measured) * 1000, max(measured) * 1000
    for endpoint in latency.endpoints:
        assert 0.25 * low <= endpoint.ttft_ms <= 1.5 * high, (endpoint.ttft_ms, sorted(measured))
        assert endpoint.tpot_ms > 0 and endpoint.valid
