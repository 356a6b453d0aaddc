"""Disaggregated serving through a real Envoy: a prefill pod, decode pods behind ``epp sidecar``, the picker.

The pool has one prefill pod and two decode pods (``llm-d.ai/role``), each decode pod a simulator
behind its sidecar, in every pool mode. The picker runs upstream's P/D configuration. A long
uncached prompt is prefilled on the prefill pod and decoded on a decode pod: the prefill simulator
counts a remote-decode request, the decode simulator a remote prefill (with the prefill pod's KV
parameters), the sidecar a ``prefill-decode`` request; the client sees one ordinary answer, JSON and
SSE. A short prompt, and the same long prompt again (now cached on the decode pod), are decoded
only. A prefill engine that stops answering is retried as the sidecar's flags say and then
prefilled by the decode engine. ``Explain`` shows the stages and the decider's numbers. SSRF
protection (CRD modes: it reads the InferencePool) refuses a prefill host outside the pool.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import grpc
import pytest
from picker_configs import PD
from pool_modes import ALL_MODES, CRD_MODES, POOL, served

from epp.api import pb
from epp.framework import headers
from epp_sim.kube_objects import V1_POOL_GROUP, V1ALPHA2_POOL_GROUP, PoolMode
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.envoy import ext_proc_problems
from epp_sim.stack.hermetic import HermeticPool

MODEL = "m"
SIM = SimConfig(model=MODEL, time_scale=10.0)
ROLES = ("prefill", "decode", "decode")
LONG = "You are a careful assistant. Answer in detail. " * 40  # 1880 characters: 470 tokens (bytes / 4)
RETRIES = ("--prefill-max-retries=2", "--prefill-retry-backoff=10ms")


async def pd_pool(epp_pool: PoolFactory, mode: PoolMode, *sidecar_args: str) -> HermeticPool:
    return await epp_pool(
        mode,
        pods=3,
        roles=ROLES,
        sidecar_args=[*RETRIES, *sidecar_args],
        sim_config=SIM,
        objects=served(mode, MODEL),
        picker_args=["--config-text", PD],
        envoy=True,
    )


def sidecar_count(env: HermeticPool, route: str, path: str = "/v1/completions") -> float:
    total = 0.0
    for pod in env.pods:
        if pod.sidecar is not None:
            value = pod.sidecar.metrics.registry.get_sample_value(
                "epp_sidecar_requests_total", {"path": path, "route": route}
            )
            total += value or 0.0
    return total


def engine(env: HermeticPool, index: int) -> dict[str, Any]:
    return env.servers[index].stats()


async def completion(http: aiohttp.ClientSession, env: HermeticPool, prompt: str, **extra: str) -> dict[str, Any]:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 5}
    async with http.post(f"{env.envoy_url}/v1/completions", json=body, headers=extra) as resp:
        answer: dict[str, Any] = await resp.json()
        assert resp.status == 200, answer
    return answer


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_prefill_on_the_prefill_pod_decode_on_a_decode_pod(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await pd_pool(epp_pool, mode)
    async with aiohttp.ClientSession() as http:
        answer = await completion(http, env, LONG)
        assert answer["object"] == "text_completion" and answer["usage"]["completion_tokens"] == 5
        assert answer["choices"][0]["finish_reason"] == "length"  # the client never sees the prefill leg
        assert engine(env, 0)["remote_decodes"] == 1  # the prefill pod prefilled it, for a remote decode
        decoded = [i for i in (1, 2) if engine(env, i)["remote_prefills"]]
        assert len(decoded) == 1  # one decode pod pulled the KV and decoded
        received = engine(env, decoded[0])["last_kv_transfer_params"]
        assert received["remote_engine_id"] == f"sim-{env.servers[0].address}"
        assert sidecar_count(env, "prefill-decode") == 1

        chat = {
            "model": MODEL,
            "messages": [{"role": "user", "content": "Tell me a story about a lighthouse. " * 30}],
            "max_tokens": 6,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        async with http.post(f"{env.envoy_url}/v1/chat/completions", json=chat) as resp:
            assert resp.status == 200 and resp.headers["content-type"].startswith("text/event-stream")
            events = [line.strip() async for line in resp.content if line.startswith(b"data: ")]
        assert events[-1] == b"data: [DONE]"
        assert json.loads(events[-2][6:])["usage"]["completion_tokens"] == 6
        assert engine(env, 0)["remote_decodes"] == 2
        assert sidecar_count(env, "prefill-decode", "/v1/chat/completions") == 1

        await completion(http, env, "Hi there")  # short: no prefill
        await completion(http, env, LONG)  # the decode pod that has it gets it again, and decodes it alone
        assert engine(env, 0)["remote_decodes"] == 2 and engine(env, 0)["requests"] == 2
        assert sidecar_count(env, "decode-only") == 2
        assert engine(env, decoded[0])["remote_prefills"] + engine(env, 3 - decoded[0])["remote_prefills"] == 2
    labels = {"plugin_name": "disagg-profile-handler", "plugin_type": "disagg-profile-handler", "model_name": MODEL}
    assert env.sample("llm_d_epp_disagg_decision_total", **labels, decision_type="prefill-decode") == 2
    assert env.sample("llm_d_epp_disagg_decision_total", **labels, decision_type="decode-only") == 2
    assert ext_proc_problems(await env.envoy.counters()) == {}


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_a_dead_prefill_engine_is_retried_then_prefilled_locally(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await pd_pool(epp_pool, mode)
    env.servers[0].fail(503)  # the prefill engine is gone; its /metrics still answer, so the picker keeps it
    async with aiohttp.ClientSession() as http:
        answer = await completion(http, env, LONG)
    assert answer["usage"]["completion_tokens"] == 5
    assert engine(env, 0)["errors"] == 3  # the first try and 2 retries (--prefill-max-retries=2)
    sidecars = [p.sidecar for p in env.pods if p.sidecar is not None]
    fallbacks = sum(
        s.metrics.registry.get_sample_value("epp_sidecar_local_prefill_fallbacks_total") or 0 for s in sidecars
    )
    retries = sum(s.metrics.registry.get_sample_value("epp_sidecar_prefill_retries_total") or 0 for s in sidecars)
    assert (fallbacks, retries) == (1, 2)
    assert sidecar_count(env, "local-prefill") == 1
    assert sum(engine(env, i)["remote_prefills"] for i in (1, 2)) == 0  # the decode engine prefilled it itself


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_explain_shows_the_stages_and_the_deciders_numbers(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await pd_pool(epp_pool, mode)
    await env.set_pins([{"waiting": 0}, {"waiting": 3}, {"waiting": 0}])  # the second decode pod is the idle one
    body = json.dumps({"model": MODEL, "prompt": LONG, "max_tokens": 5}).encode()
    async with grpc.aio.insecure_channel(env.picker.health_target) as channel:
        request = pb.ExplainRequest(headers={":path": "/v1/completions"}, body=body)
        answer = await pb.ExplainStub(channel).Explain(request, timeout=10)
    decision = answer.disaggregation
    assert decision.handler == "disagg-profile-handler/disagg-profile-handler"
    assert decision.decision == "prefill-decode"
    stages = {s.stage: s for s in decision.stages}
    assert stages["decode"].ran and stages["prefill"].ran and not stages["encode"].ran
    assert stages["prefill"].decider == "prefix-based-pd-decider/prefix-based-pd-decider"
    numbers = stages["prefill"].numbers
    assert numbers["prompt_tokens"] == 470 and numbers["cached_tokens"] == 0 and numbers["nonCachedTokens"] == 64
    assert answer.upstream_headers[headers.PREFILLER_HOST_PORT] == env.hostport(0)
    assert [p.name for p in answer.profiles] == ["decode", "prefill"]
    labels = {"plugin_name": "disagg-profile-handler", "plugin_type": "disagg-profile-handler", "model_name": MODEL}
    assert env.sample("llm_d_epp_disagg_decision_total", **labels, decision_type="prefill-decode") == 0  # a dry run
    routed = await env.route({"model": MODEL, "prompt": LONG, "max_tokens": 5})
    assert routed.endpoint == answer.picked[0] == env.hostport(2)
    assert routed.headers[headers.PREFILLER_HOST_PORT] == env.hostport(0).encode()


@pytest.mark.parametrize("mode", CRD_MODES)  # the allowlist is the InferencePool's pods
async def test_ssrf_protection_refuses_a_prefill_host_outside_the_pool(
    epp_pool: PoolFactory, epp_cluster: FakeCluster, mode: PoolMode
) -> None:
    group = V1ALPHA2_POOL_GROUP if mode == "v1alpha2" else V1_POOL_GROUP
    protect = ("--enable-ssrf-protection", f"--inference-pool=default/{POOL}", f"--pool-group={group}")
    env = await epp_pool(
        mode,
        pods=2,
        roles=("prefill", "decode"),
        sidecar_args=[*protect, f"--kubeconfig={epp_cluster.kubeconfig}"],
        sim_config=SIM,
        objects=served(mode, MODEL),
        picker_args=["--config-text", PD],
        envoy=True,
    )
    outsider = ModelServer(SIM, host="127.0.0.250")
    async with outsider, aiohttp.ClientSession() as http:
        sidecar = f"http://{env.hostport(1)}/v1/completions"
        body = {"model": MODEL, "prompt": LONG, "max_tokens": 3}
        async with http.post(sidecar, json=body, headers={headers.PREFILLER_HOST_PORT: outsider.address}) as resp:
            assert resp.status == 403 and "SSRF" in await resp.text()
        assert outsider.stats()["requests"] == 0
        async with http.post(sidecar, json=body, headers={headers.PREFILLER_HOST_PORT: env.hostport(0)}) as resp:
            assert resp.status == 200  # a pod of the pool is allowed
        assert engine(env, 0)["remote_decodes"] == 1
        forged = {headers.PREFILLER_HOST_PORT: outsider.address}  # through the gateway the picker removes it
        await completion(http, env, "Hi", **forged)
        assert outsider.stats()["requests"] == 0
    pod = env.pods[1].sidecar
    assert pod is not None
    assert pod.metrics.registry.get_sample_value("epp_sidecar_ssrf_denied_total", {"stage": "prefiller"}) == 1
