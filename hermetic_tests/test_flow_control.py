"""Flow control end to end: requests queue instead of being refused, and leave by priority, TTL or cancel.

Saturation is pinned with the ``concurrency-detector`` at ``maxConcurrency: 1`` on one pod: a
request the test holds open keeps the pool saturated, and releasing it lets exactly one queued
request through at a time, so the order of dispatch is observable. Priorities come from
InferenceObjectives (hence the CRD modes only).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from pool_modes import CRD_MODES, POOL, served

from epp_sim.kube_objects import PoolMode, inference_objective
from epp_sim.modelserver.config import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.envoy import ext_proc_problems
from epp_sim.stack.extproc_client import ExtProcCall, post_headers, request_body, request_headers
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: concurrency-detector
  parameters: {{maxConcurrency: {concurrency}}}
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}]
flowControl:
  defaultRequestTTL: {ttl}
  maxRequests: {max_requests}
  saturationDetector: {{pluginRef: concurrency-detector}}
"""
BODY = {"model": "m", "prompt": "p"}
REASON = "x-llm-d-request-dropped-reason"
OBJECTIVES = {"critical": 10, "sheddable": -1}


async def pool(
    epp_pool: PoolFactory,
    mode: PoolMode,
    *,
    ttl: str = "30s",
    max_requests: int = 0,
    concurrency: int = 1,
    **kw: object,
) -> HermeticPool:
    objects = [*(inference_objective(n, p, POOL, mode=mode) for n, p in OBJECTIVES.items()), *served(mode, "m")]
    config = CONFIG.format(ttl=ttl, max_requests=max_requests, concurrency=concurrency)
    return await epp_pool(mode, objects=objects, picker_args=["--config-text", config], **kw)


async def hold(env: HermeticPool) -> ExtProcCall:
    """A routed request whose stream stays open: it counts as in flight until the call ends."""
    call = env.client.open()
    await call.send(request_headers(post_headers()), request_body(json.dumps(BODY).encode()))
    assert (await call.recv_one()).HasField("request_headers")
    return call


def queued(env: HermeticPool) -> float:
    return sum(
        s.value
        for metric in env.runtime.metrics.registry.collect()
        if metric.name == "llm_d_epp_flow_control_queue_size"
        for s in metric.samples
    )


def route(env: HermeticPool, objective: str = "", tenant: str = "") -> asyncio.Task[object]:
    headers = {"x-gateway-inference-objective": objective} if objective else {}
    if tenant:
        headers["x-llm-d-inference-fairness-id"] = tenant
    return asyncio.ensure_future(env.route(BODY, headers=headers))


@pytest.mark.parametrize("mode", CRD_MODES)
async def test_requests_queue_and_leave_by_priority(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await pool(epp_pool, mode, pods=1)
    busy = await hold(env)  # the pod is at its concurrency: saturation 1.0
    low = route(env, "sheddable")
    await wait_until(lambda: queued(env) == 1)
    high = route(env, "critical")
    await wait_until(lambda: queued(env) == 2)
    assert not low.done() and not high.done()  # queued, not refused (a sheddable request too)

    await busy.end()  # saturation clears: one request goes, and its own stream holds the pod again
    done, _ = await asyncio.wait({low, high}, return_when=asyncio.FIRST_COMPLETED)
    assert done == {high}
    assert (await high).status == 200  # type: ignore[attr-defined]
    assert (await low).status == 200  # type: ignore[attr-defined]
    dispatched = env.sample(
        "llm_d_epp_flow_control_requests_total", outcome="Dispatched", priority="-1", inference_pool=POOL
    )
    assert dispatched == 1 and queued(env) == 0


async def test_ttl_capacity_and_cancel(epp_pool: PoolFactory) -> None:
    env = await pool(epp_pool, "v1", pods=1, ttl="1s", max_requests=2)
    busy = await hold(env)
    expiring = route(env)
    await wait_until(lambda: queued(env) == 1)
    cancelled = env.client.open()
    await cancelled.send(request_headers(post_headers()), request_body(json.dumps(BODY).encode()))
    await wait_until(lambda: queued(env) == 2)

    full = await env.route(BODY)  # maxRequests 2: refused at once
    assert (full.status, full.headers[REASON]) == (429, b"rejected-saturated")
    assert full.error == b"inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"

    cancelled.call.cancel()  # the client goes away: out of the queue at once, its slot free
    await wait_until(lambda: queued(env) == 1)
    labels = {"fairness_id": "default-flow", "priority": "0", "inference_pool": POOL, "model_name": "m"}
    labels |= {"target_model_name": "m", "outcome": "EvictedContextCancelled"}
    await wait_until(lambda: env.sample("llm_d_epp_flow_control_request_queue_duration_seconds_count", **labels) == 1)

    answer = await expiring  # its TTL (1 s) runs out while the pod stays busy
    assert (answer.status, answer.headers[REASON]) == (429, b"rejected-ttl-expired")  # type: ignore[attr-defined]
    await busy.end()


async def test_a_reload_keeps_queued_requests_and_refuses_new_flow_control(
    epp_pool: PoolFactory, tmp_path: Path
) -> None:
    path = tmp_path / "config.yaml"
    config = CONFIG.format(ttl="30s", max_requests=0, concurrency=1)
    path.write_text(config)
    env = await epp_pool("v1", pods=1, picker_args=["--config-file", str(path)])
    busy = await hold(env)
    waiting = route(env)
    await wait_until(lambda: queued(env) == 1)

    path.write_text(config.replace("{pluginRef: queue-scorer}", "{pluginRef: queue-scorer, weight: 3}"))
    await wait_until(lambda: env.sample("epp_config_reloads_total", result="success") == 1, message="reloaded")
    path.write_text(config.replace("defaultRequestTTL: 30s", "defaultRequestTTL: 10s"))
    await wait_until(lambda: env.sample("epp_config_reloads_total", result="rejected") == 1, message="refused")
    assert queued(env) == 1 and not waiting.done()  # still queued, through both

    await busy.end()
    assert (await waiting).status == 200  # type: ignore[attr-defined]


async def test_a_burst_through_envoy_is_queued_not_refused(epp_pool: PoolFactory) -> None:
    """Twelve requests at once on two pods that take two each: all served, Envoy's message_timeout in place."""
    env = await pool(
        epp_pool, "v1", pods=2, concurrency=2, envoy=True, sim_config=SimConfig(model="m", decode_time_base=0.02)
    )
    async with aiohttp.ClientSession() as http:
        url = f"{env.envoy_url}/v1/completions"

        async def one(i: int) -> tuple[int, str]:
            body = {"model": "m", "prompt": f"request {i}", "max_tokens": 8}
            async with http.post(url, json=body) as resp:
                return resp.status, await resp.text()

        results = await asyncio.gather(*(one(i) for i in range(12)))
    assert [status for status, _ in results] == [200] * 12, results
    labels = {"fairness_id": "default-flow", "priority": "0", "inference_pool": POOL, "model_name": "m"}
    labels |= {"target_model_name": "m", "outcome": "Dispatched"}
    name = "llm_d_epp_flow_control_request_queue_duration_seconds"
    assert env.sample(f"{name}_count", **labels) == 12
    assert env.sample(f"{name}_bucket", **labels, le="0.01") < 12  # some waited for a pod (~160 ms a request)
    assert ext_proc_problems(await env.envoy.counters()) == {}


# The llm-d flow-control guide's configuration (its well-lit-path sample): a fairness policy declared among
# the plugins and a profile that names no picker. The profile gets max-score-picker, as upstream's loader
# gives it: a fairness policy has a ``pick`` too, but its type declares no Picker kind.
GUIDE_CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: round-robin-fairness-policy
- type: fcfs-ordering-policy
- type: concurrency-detector
  parameters: {maxConcurrency: 132, concurrencyMode: requests, headroom: 0.0}
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
flowControl:
  saturationDetector: {pluginRef: concurrency-detector}
  maxBytes: "10Gi"
  maxRequests: "1k"
  defaultRequestTTL: "60s"
  priorityBands:
  - {priority: 100, maxRequests: "500", fairnessPolicyRef: round-robin-fairness-policy,
     orderingPolicyRef: fcfs-ordering-policy}
  - {priority: 0, maxRequests: "200", fairnessPolicyRef: round-robin-fairness-policy,
     orderingPolicyRef: fcfs-ordering-policy}
  - {priority: -10, maxRequests: "50", fairnessPolicyRef: round-robin-fairness-policy,
     orderingPolicyRef: fcfs-ordering-policy}
"""


async def test_the_flow_control_guide_config_routes_through_envoy(epp_pool: PoolFactory) -> None:
    env = await epp_pool(
        "v1",
        pods=3,
        envoy=True,
        objects=served("v1", "m"),
        picker_args=["--config-text", GUIDE_CONFIG],
        sim_config=SimConfig(model="m"),
    )
    (pool,) = env.runtime.pools
    loaded = pool.config
    profile = loaded.scheduler.profiles["default"]
    assert profile.picker.typed_name.type == "max-score-picker"
    async with aiohttp.ClientSession() as http:
        for i in range(6):
            body = {"model": "m", "prompt": f"guide request {i}", "max_tokens": 4}
            async with http.post(f"{env.envoy_url}/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["model"] == "m"
    assert ext_proc_problems(await env.envoy.counters()) == {}
