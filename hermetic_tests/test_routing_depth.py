"""Routing depth end to end: prefix affinity and spill-over, cache salt, rewrites, live config."""

from __future__ import annotations

import asyncio
import collections
import json
from pathlib import Path

import pytest
from pool_modes import ALL_MODES, CRD_MODES, POOL, served

from epp_sim.kube_objects import PoolMode, model_rewrite
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.extproc_client import post_headers, request_body, request_headers, response_headers, set_headers
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

SYSTEM = "You are a meticulous assistant for a food review site. " * 30  # ~1.7 KB shared prefix
EVEN = {"waiting": 0, "kv_cache_usage": 0.1}


def chat(question: str, *, salt: str | None = None) -> dict[str, object]:
    body: dict[str, object] = {
        "model": "m",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
    }
    if salt is not None:
        body["cache_salt"] = salt
    return body


async def _chat(env: HermeticPool, question: str, **kw: str) -> str:
    routed = await env.route(chat(question, **kw), path="/v1/chat/completions")
    assert routed.status == 200
    return routed.endpoint


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_shared_prefix_sticks_to_one_pod_then_spills_when_it_saturates(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    env = await epp_pool(mode, pods=3, objects=served(mode, "m"))
    await env.set_pins([EVEN, EVEN, EVEN])
    first = await _chat(env, "What is the best pizza in town?")
    for i in range(8):
        assert await _chat(env, f"question {i}") == first
    sticky = next(i for i in range(3) if env.hostport(i) == first)
    pins = [dict(EVEN) for _ in range(3)]
    pins[sticky] = {"waiting": 12, "kv_cache_usage": 0.9}
    await env.set_pins(pins)
    spilled = {await _chat(env, f"later question {i}") for i in range(4)}
    assert first not in spilled


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_cache_salt_does_not_match_an_unsalted_prefix(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=2, objects=served(mode, "m"))
    await env.set_pins([EVEN, EVEN])
    first = await _chat(env, "seed question")
    sticky = 0 if env.hostport(0) == first else 1
    pins = [dict(EVEN), dict(EVEN)]
    pins[sticky] = {"waiting": 1, "kv_cache_usage": 0.1}  # slightly busier: only affinity keeps it
    await env.set_pins(pins)
    assert await _chat(env, "another question") == first
    assert await _chat(env, "another question", salt="tenant-a") == env.hostport(1 - sticky)


@pytest.mark.parametrize("mode", CRD_MODES)  # rewrites are InferenceModelRewrite objects
async def test_model_rewrite_weights_hold_statistically(epp_pool: PoolFactory, mode: PoolMode) -> None:
    canary = model_rewrite("canary", POOL, {"food-review-1": 90, "food-review-2": 10}, model="food-review", mode=mode)
    env = await epp_pool(mode, pods=1, objects=[canary, *served(mode, "food-review-1", "food-review-2")], seed=11)
    await wait_until(lambda: bool(env.runtime.pools[0].datastore.rewrites()), timeout=10)
    counts: collections.Counter[str] = collections.Counter()
    for i in range(300):
        routed = await env.route({"model": "food-review", "prompt": f"p{i}"})
        counts[json.loads(routed.body)["model"]] += 1
    assert set(counts) == {"food-review-1", "food-review-2"}
    assert 0.85 <= counts["food-review-1"] / 300 <= 0.95


QUEUE_ONLY = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer}
"""
KV_ONLY = QUEUE_ONLY.replace("queue-scorer", "kv-cache-utilization-scorer")


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_config_reload_good_bad_and_under_load_drops_no_stream(
    epp_pool: PoolFactory, mode: PoolMode, tmp_path: Path
) -> None:
    config = tmp_path / "epp-config.yaml"
    config.write_text(QUEUE_ONLY)
    env = await epp_pool(mode, pods=2, objects=served(mode, "m"), picker_args=["--config-file", str(config)])
    # pod 0: short queue, full cache; pod 1: long queue, empty cache.
    await env.set_pins([{"waiting": 0, "kv_cache_usage": 0.9}, {"waiting": 4, "kv_cache_usage": 0.0}])
    assert (await env.route({"model": "m", "prompt": "p"})).endpoint == env.hostport(0)
    status = env.runtime.config_status
    generation = status.generation

    results: list[int] = []
    stop = asyncio.Event()

    async def load() -> None:
        i = 0
        while not stop.is_set():
            results.append((await env.route({"model": "m", "prompt": f"load {i}"})).status)
            i += 1

    workers = [asyncio.create_task(load(), name=f"load-{n}") for n in range(4)]
    try:
        config.write_text(KV_ONLY)
        await wait_until(lambda: status.generation == generation + 1, timeout=10, message="reloaded")
        config.write_text("plugins: [this is not a config")
        await wait_until(
            lambda: env.sample("epp_config_reloads_total", result="rejected") == 1, timeout=10, message="rejected"
        )
        await wait_until(lambda: len(results) > 40, timeout=20)
    finally:
        stop.set()
        await asyncio.gather(*workers)
    assert status.generation == generation + 1  # the bad file kept the last good config
    assert env.sample("epp_config_last_reload_successful") == 0
    assert set(results) == {200}  # no stream dropped or failed during the swaps
    assert (await env.route({"model": "m", "prompt": "p"})).endpoint == env.hostport(1)  # KV now decides


SESSION = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: session-affinity-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 1}
  - {pluginRef: session-affinity-scorer, weight: 3}
"""


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_session_token_is_returned_and_keeps_the_session_on_its_pod(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    # session-affinity-scorer is experimental (Alpha) upstream: it needs the flag there and here.
    args = ["--allow-experimental-plugins", "--config-text", SESSION]
    env = await epp_pool(mode, pods=3, objects=served(mode, "m"), picker_args=args)
    await env.set_pins([EVEN, EVEN, EVEN])
    call = env.client.open()
    await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"hello"}'))
    first, _ = await call.recv(2)
    chosen = set_headers(first.request_headers.response.header_mutation)["x-gateway-destination-endpoint"]
    await call.send(response_headers({":status": "200", "content-type": "application/json"}, eos=True))
    answer = await call.recv_one()
    await call.end()
    token = set_headers(answer.response_headers.response.header_mutation)["x-session-token"].decode()
    others = [dict(EVEN) for _ in range(3)]
    sticky = next(i for i in range(3) if env.hostport(i).encode() == chosen)
    others[sticky] = {"waiting": 2, "kv_cache_usage": 0.1}  # busier, but the session keeps it
    await env.set_pins(others)
    for i in range(4):
        routed = await env.route({"model": "m", "prompt": f"turn {i}"}, headers={"x-session-token": token})
        assert routed.endpoint.encode() == chosen
    fresh = await env.route({"model": "m", "prompt": "no session"})
    assert fresh.endpoint.encode() != chosen
