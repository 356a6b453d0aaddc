"""``Explain`` agrees with real routing: same pick, same scores, and no trace of itself left behind.

Each case asks ``epp.v1.Explain`` (over gRPC, on the health port) about a request, then sends the
same request through ext_proc as Envoy would, on the same pool state. The modern case (the
default config: queue, KV-cache, prefix and LoRA scorers, max-score picker) compares the pick
and every candidate's total with the real decision's ``--emit-endpoint-scores``; the v0.3 case
(the legacy filter tree and a random picker) compares the pick where the tree leaves one pod,
and the 429 of a shed request. Between the two, the dry run must leave the prefix index, the
scheduler's and plugins' counters and the admission state as they were.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import aiohttp
import grpc
import pytest
from picker_configs import LEGACY_V03
from pool_modes import ALL_MODES, CRD_MODES, POOL, served
from prometheus_client.parser import text_string_to_metric_families

from epp.api import pb
from epp_sim.kube_objects import PoolMode, inference_objective
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool

PROMPT = "You are a helpful assistant. " * 20  # several prefix blocks (64 characters each)
COUNTED = ("scheduler_attempts", "plugin_duration_seconds_count", "scheduler_e2e_duration_seconds_count")


async def explain(env: HermeticPool, body: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> Any:
    async with grpc.aio.insecure_channel(env.picker.health_target) as channel:
        request = pb.ExplainRequest(headers=dict(headers or {}), body=json.dumps(body).encode())
        return await pb.ExplainStub(channel).Explain(request, timeout=10)


async def prefix_index_size(env: HermeticPool) -> int:
    async with grpc.aio.insecure_channel(env.picker.health_target) as channel:
        listing = await pb.EndpointsStub(channel).ListEndpoints(pb.ListEndpointsRequest(), timeout=10)
    return sum(sum(p.prefix_index_sizes.values()) for p in listing.pools)


async def scraped_index_sizes(env: HermeticPool) -> tuple[float, float]:
    """GIE's prefix-indexer size and the sum of the llm-d router's per-plugin ones, as ``/metrics`` serves them."""
    async with aiohttp.ClientSession() as session, session.get(env.picker.metrics_url) as response:
        text = await response.text()
    values = {"inference_extension_prefix_indexer_size": 0.0, "llm_d_epp_prefix_indexer_size": 0.0}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in values:
                values[sample.name] += sample.value
    return values["inference_extension_prefix_indexer_size"], values["llm_d_epp_prefix_indexer_size"]


def counted(env: HermeticPool) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the scheduler's and plugins' counters, by name and labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in env.runtime.metrics.registry.collect()
        for s in family.samples
        if any(c in s.name for c in COUNTED)
    }


def totals(answer: Any) -> dict[str, float]:
    """The primary profile's total per endpoint address."""
    (profile,) = [p for p in answer.profiles if p.name == answer.primary_profile]
    return {e.address: e.total for e in profile.endpoints}


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_modern_config_same_pick_same_scores_no_side_effects(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=3, objects=served(mode, "m"), picker_args=["--emit-endpoint-scores"])
    await env.set_pins(
        [
            {"waiting": 3, "kv_cache_usage": 0.5},
            {"waiting": 1, "kv_cache_usage": 0.2},
            {"waiting": 8, "kv_cache_usage": 0.1},
        ]
    )
    body = {"model": "m", "prompt": PROMPT}
    before, index_before = counted(env), await prefix_index_size(env)
    first = await explain(env, body)
    again = await explain(env, body)
    assert counted(env) == before and await prefix_index_size(env) == index_before  # the dry run left nothing
    assert again == first

    assert first.admission.verdict == pb.Admission.ADMITTED and not first.HasField("failure")
    (profile,) = first.profiles
    assert [s.plugin for s in profile.scorers] == [
        "queue-scorer/queue-scorer",
        "kv-cache-utilization-scorer/kv-cache-utilization-scorer",
        "prefix-cache-scorer/prefix-cache-scorer",
        "lora-affinity-scorer/lora-affinity-scorer",
    ]
    for row in profile.endpoints:
        assert row.total == pytest.approx(sum(s.weighted for s in row.scores))
        for score, scorer in zip(row.scores, profile.scorers, strict=True):
            assert score.weighted == pytest.approx(min(max(score.raw, 0.0), 1.0) * scorer.weight)

    routed = await env.route(body)
    assert routed.status == 200 and [routed.endpoint] == list(first.picked) == [env.hostport(1)]
    assert routed.endpoint_scores == pytest.approx(totals(first))
    assert await prefix_index_size(env) > index_before  # the real request taught the index
    size = await prefix_index_size(env)  # and /metrics, refreshed from the plugins as it is scraped, agrees
    assert await scraped_index_sizes(env) == (size, size)

    after = await explain(env, body)  # the index now favours the pod that served the prompt
    prefix = [row.scores[2].raw for row in after.profiles[0].endpoints if row.address == env.hostport(1)]
    assert prefix == [1.0]
    routed = await env.route(body)
    assert [routed.endpoint] == list(after.picked) and routed.endpoint_scores == pytest.approx(totals(after))


@pytest.mark.parametrize("mode", CRD_MODES)  # the tree's critical branch needs an InferenceObjective
async def test_v03_tree_same_pick_and_same_shed(epp_pool: PoolFactory, mode: PoolMode) -> None:
    objects = [
        inference_objective("critical", 10, POOL, mode=mode),
        inference_objective("batch", -1, POOL, mode=mode),
        *served(mode, "sql-lora"),
    ]
    env = await epp_pool(mode, pods=3, objects=objects, picker_args=["--config-text", LEGACY_V03])
    full = {"running_loras": ["a", "b"], "max_lora": 2}  # no room for another adapter
    await env.set_pins(
        [
            {"waiting": 9, "kv_cache_usage": 0.9, **full},
            {"waiting": 7, "kv_cache_usage": 0.95, "running_loras": ["sql-lora"], "max_lora": 2},
            {"waiting": 8, "kv_cache_usage": 0.9, **full},
        ]
    )
    body = {"model": "sql-lora", "prompt": "q"}
    critical = {"x-gateway-inference-objective": "critical"}
    before = counted(env)
    answer = await explain(env, body, critical)
    assert counted(env) == before
    assert answer.admission.verdict == pb.Admission.NOT_CHECKED and answer.priority == 10
    (profile,) = answer.profiles
    (tree,) = profile.filters
    assert tree.plugin == "legacy-filter-tree/legacy-filter-tree" and list(tree.kept) == ["default/pod-1-rank-0"]
    for _ in range(3):
        routed = await env.route(body, headers=critical)
        assert [routed.endpoint] == list(answer.picked) == [env.hostport(1)]

    batch = {"x-gateway-inference-objective": "batch"}  # sheddable; every queue is over the tree's 5
    shed = await explain(env, body, batch)
    assert shed.priority == -1 and shed.failure.http_status == 429 and not shed.picked
    assert "no endpoints available" in shed.profiles[0].error
    routed = await env.route(body, headers=batch)
    assert routed.status == 429 and routed.error.decode() in shed.failure.message
