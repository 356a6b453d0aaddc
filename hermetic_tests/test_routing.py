"""Routing decisions end to end: the exact endpoint for pinned metrics, in each pool mode."""

from __future__ import annotations

import json

import pytest
from picker_configs import LEGACY_V03
from pool_modes import ALL_MODES, CRD_MODES, POOL, served

from epp_sim.kube_objects import PoolMode, inference_model, inference_objective
from epp_sim.pytest_plugin import PoolFactory


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_happy_path_routes_to_a_pod_with_exact_wire_contract(epp_pool: PoolFactory, mode: PoolMode) -> None:
    critical = [inference_model("my-model", POOL, criticality="Critical")] if mode == "v1alpha2" else []
    env = await epp_pool(mode, pods=2, objects=critical)
    body = {"model": "my-model", "prompt": "hello", "max_tokens": 5}
    raw = json.dumps(body).encode()
    routed = await env.route(body, headers={"x-request-id": "req-1"})
    assert routed.status == 200
    assert routed.endpoint in {env.hostport(0), env.hostport(1)}
    assert routed.metadata_endpoint == routed.endpoint
    assert routed.headers["Content-Length"] == str(len(raw)).encode()
    assert set(routed.headers) == {"x-gateway-destination-endpoint", "Content-Length"}  # only what changes
    assert routed.body == raw  # model unchanged: the client's bytes go through untouched
    priority = "1" if mode == "v1alpha2" else "0"  # the InferenceModel's criticality, else the default
    labels = {"model_name": "my-model", "target_model_name": "my-model", "priority": priority}
    assert env.sample("inference_objective_request_total", **labels) == 1


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_min_kv_cache_without_lora_picks_least_queue_then_least_kv(epp_pool: PoolFactory, mode: PoolMode) -> None:
    """v0.3's hermetic case 1 under the default profile: queue 3/0/10, KV 0.2/0.1/0.2 → pod 1."""
    env = await epp_pool(mode, pods=3, objects=served(mode, "my-model"))
    await env.set_pins(
        [
            {"waiting": 3, "kv_cache_usage": 0.2},
            {"waiting": 0, "kv_cache_usage": 0.1},
            {"waiting": 10, "kv_cache_usage": 0.2},
        ]
    )
    for i in range(5):
        routed = await env.route({"model": "my-model", "prompt": f"question {i}"})
        assert routed.endpoint == env.hostport(1)


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_lora_affinity_prefers_the_pod_with_the_adapter_loaded(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=3, objects=served(mode, "sql-lora"))
    await env.set_pins(
        [
            {"waiting": 1, "kv_cache_usage": 0.2, "running_loras": [], "max_lora": 1},
            {"waiting": 1, "kv_cache_usage": 0.2, "running_loras": ["sql-lora"], "max_lora": 1},
            {"waiting": 1, "kv_cache_usage": 0.2, "running_loras": ["other"], "max_lora": 1},
        ]
    )
    for i in range(5):
        routed = await env.route({"model": "sql-lora", "prompt": f"q{i}"})
        assert routed.endpoint == env.hostport(1)


@pytest.mark.parametrize("mode", CRD_MODES)  # the tree's critical branch needs an InferenceObjective
async def test_v03_tree_affinity_and_an_excessive_queue_losing_it(epp_pool: PoolFactory, mode: PoolMode) -> None:
    objects = [inference_objective("critical", 10, POOL, mode=mode), *served(mode, "sql-lora")]
    env = await epp_pool(mode, pods=3, objects=objects, picker_args=["--config-text", LEGACY_V03])
    headers = {"x-gateway-inference-objective": "critical"}
    lora = {"running_loras": ["sql-lora"], "max_lora": 2}
    free = {"running_loras": [], "max_lora": 2}
    await env.set_pins(
        [
            {"waiting": 1, "kv_cache_usage": 0.3, **lora},
            {"waiting": 0, "kv_cache_usage": 0.1, **free},
            {"waiting": 2, "kv_cache_usage": 0.1, **free},
        ]
    )
    for i in range(5):
        routed = await env.route({"model": "sql-lora", "prompt": f"q{i}"}, headers=headers)
        assert routed.endpoint == env.hostport(0)  # affinity (probability 0.999, seeded)
    await env.set_pins(
        [
            {"waiting": 200, "kv_cache_usage": 0.3, **lora},  # queue >= 128: loses its affinity
            {"waiting": 0, "kv_cache_usage": 0.1, **free},
            {"waiting": 150, "kv_cache_usage": 0.1, **free},
        ]
    )
    for i in range(5):
        routed = await env.route({"model": "sql-lora", "prompt": f"q{i}"}, headers=headers)
        assert routed.endpoint == env.hostport(1)
