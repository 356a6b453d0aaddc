"""The simulator in both disaggregated roles, and the interference P/D avoids.

Engine cases run on a ManualClock: a remote-decode request (the prefill pod's leg) prefills and
finishes ``remote_decode``; a remote-prefill request (the decode pod's leg) computes none of its
prompt and waits the modelled KV pull instead; on an aggregated engine a long prefill stretches
the steps of every sequence decoding beside it. HTTP cases run a real server: the prefill answer
carries ``kv_transfer_params`` naming the server, streaming a prefill is refused, the decode leg's
parameters are kept for tests, ``cache_hit_threshold`` answers ``cache_threshold``.
"""

from __future__ import annotations

from collections.abc import Callable

import aiohttp
import pytest
from test_modelserver_engine import advance_until, started

from epp.clock import ManualClock
from epp_sim.modelserver import Engine, GenerationRequest, ModelServer, SimConfig

PROMPT = "lorem ipsum dolor sit amet " * 80  # 2160 characters: 540 prompt tokens


async def test_a_remote_prefill_pulls_its_kv_instead_of_computing_it(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    timing = {"prefill_time_per_token": 0.001, "decode_time_base": 0.01, "decode_time_per_seq": 0.0}
    pull = {"kv_transfer_latency": 0.02, "kv_transfer_time_per_token": 0.0001}
    local = await started(make_engine(**timing, **pull))
    remote = await started(make_engine(**timing, **pull))
    here = local.submit(GenerationRequest(prompt=PROMPT, max_tokens=3))
    pulled = remote.submit(GenerationRequest(prompt=PROMPT, max_tokens=3, remote_prefill=True))
    await advance_until(clock, lambda: here.done and pulled.done)
    assert here.ttft == pytest.approx(0.01 + 540 * 0.001, abs=0.005)  # one prefill step of 540 tokens
    assert pulled.ttft == pytest.approx(0.02 + 540 * 0.0001 + 0.01, abs=0.005)  # the pull, then a decode step
    assert pulled.transferred_tokens == 540 and pulled.completion_tokens == 3
    stats = remote.stats()
    assert stats["remote_prefills"] == 1 and stats["kv_pulled_tokens"] == 540
    assert stats["cached_blocks"] == 540 // 16  # the pulled prompt is in its prefix cache now
    again = remote.submit(GenerationRequest(prompt=PROMPT, max_tokens=1, remote_prefill=True))
    await advance_until(clock, lambda: again.done)
    assert again.transferred_tokens == 540 - 33 * 16  # only what this pod does not hold is pulled


async def test_a_remote_decode_prefills_and_says_so(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    engine = await started(make_engine())
    assert b"sim_pd_" not in engine.render_metrics()  # as a vLLM without a KV connector: no such families
    handle = engine.submit(GenerationRequest(prompt=PROMPT, max_tokens=1, remote_decode=True))
    await advance_until(clock, lambda: handle.done)
    assert handle.finish_reason == "remote_decode" and handle.completion_tokens == 1
    assert engine.stats()["remote_decodes"] == 1
    page = engine.render_metrics().decode()
    assert 'vllm:request_success_total{engine="0",finished_reason="length"' in page
    assert 'sim_pd_remote_decode_requests_total{engine="0"' in page  # the families appear with the first exchange


async def test_long_prefills_slow_the_decodes_beside_them(
    clock: ManualClock, make_engine: Callable[..., Engine]
) -> None:
    """What P/D buys: on an aggregated engine a long prompt's prefill lands in the steps of running decodes."""
    timing = {"prefill_time_per_token": 0.0001, "decode_time_base": 0.01, "decode_time_per_seq": 0.0}
    engine = await started(make_engine(**timing, max_num_batched_tokens=2048))
    decoding = engine.submit(GenerationRequest(prompt="short", max_tokens=40, stream=True))
    await advance_until(clock, lambda: decoding.completion_tokens >= 5)
    gaps: list[float] = []
    last = engine.now()
    seen = decoding.completion_tokens
    long = engine.submit(GenerationRequest(prompt="x" * 4 * 6000, max_tokens=1))  # 6000 tokens: 3 chunks
    while not long.done:
        await advance_until(clock, lambda seen=seen: decoding.completion_tokens > seen, tick=0.001)  # type: ignore[misc]
        seen = decoding.completion_tokens
        gaps.append(engine.now() - last)
        last = engine.now()
    assert max(gaps) == pytest.approx(0.01 + 2048 * 0.0001, abs=0.003)  # a step carrying a full prefill chunk
    assert sum(g > 0.1 for g in gaps) == 3  # one slow step per chunk of the long prompt


async def test_cache_hit_threshold_finishes_at_once(clock: ManualClock, make_engine: Callable[..., Engine]) -> None:
    engine = await started(make_engine())
    cold = engine.submit(GenerationRequest(prompt=PROMPT, max_tokens=4, cache_hit_threshold=0.5))
    assert cold.done and cold.finish_reason == "cache_threshold" and cold.completion_tokens == 0
    warm = engine.submit(GenerationRequest(prompt=PROMPT, max_tokens=1))
    await advance_until(clock, lambda: warm.done)
    hit = engine.submit(GenerationRequest(prompt=PROMPT, max_tokens=2, cache_hit_threshold=0.5))
    await advance_until(clock, lambda: hit.done)
    assert hit.finish_reason == "length" and hit.completion_tokens == 2


async def test_the_http_legs_of_a_disaggregated_request() -> None:
    fast = SimConfig(time_scale=100.0)
    async with (
        ModelServer(fast, host="127.0.0.2") as prefill,
        ModelServer(fast, host="127.0.0.3") as decode,
        aiohttp.ClientSession() as http,
    ):
        body = {"model": fast.model, "prompt": PROMPT, "max_tokens": 1, "stream": False}
        leg = {"do_remote_decode": True, "do_remote_prefill": False, "remote_engine_id": None}
        async with http.post(f"{prefill.url}/v1/completions", json={**body, "kv_transfer_params": leg}) as resp:
            answer = await resp.json()
        assert resp.status == 200 and answer["choices"][0]["finish_reason"] == "remote_decode"
        params = answer["kv_transfer_params"]
        assert params["do_remote_prefill"] is True and params["remote_engine_id"] == f"sim-{prefill.address}"
        assert (params["remote_host"], params["remote_port"]) == ("127.0.0.2", prefill.port)
        assert len(params["remote_block_ids"]) == 540 // 16

        streamed = {**body, "stream": True, "kv_transfer_params": leg}
        async with http.post(f"{prefill.url}/v1/completions", json=streamed) as resp:
            refused = await resp.json()
        assert resp.status == 400 and refused["error"]["message"] == "Prefill does not support streaming"

        chat = {"model": fast.model, "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 5, "stream": True}
        async with http.post(f"{decode.url}/v1/chat/completions", json={**chat, "kv_transfer_params": params}) as resp:
            text = await resp.text()
        assert resp.status == 200 and text.endswith("data: [DONE]\n\n")
        assert decode.stats()["last_kv_transfer_params"] == params and decode.stats()["remote_prefills"] == 1

        bad = {**body, "kv_transfer_params": {"do_remote_decode": "yes"}}
        async with http.post(f"{decode.url}/v1/completions", json=bad) as resp:
            error = await resp.json()
        assert resp.status == 400 and "do_remote_decode must be a boolean" in error["error"]["message"]

        cold = {**body, "prompt": "a cold prompt " * 20, "cache_hit_threshold": 0.9}
        async with http.post(f"{decode.url}/v1/completions", json=cold) as resp:
            answer = await resp.json()
        assert answer["choices"][0]["finish_reason"] == "cache_threshold"
