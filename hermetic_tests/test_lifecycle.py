"""Pod and pool lifecycle: only Ready, live, selected pods are ever picked; changes land at once."""

from __future__ import annotations

import pytest
from pool_modes import ALL_MODES, CRD_MODES, POOL, served

from epp_sim.kube_objects import V1_POOL_GROUP, V1ALPHA2_POOL_GROUP, PoolMode
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool


async def _only(env: HermeticPool, *indexes: int) -> None:
    expected = {env.hostport(i) for i in indexes}
    await env.wait_for_addresses(expected)
    for i in range(6):
        routed = await env.route({"model": "m", "prompt": f"p{i}"})
        assert routed.endpoint in expected


@pytest.mark.epp_apiserver(pod_grace_seconds=60)
@pytest.mark.parametrize("mode", ALL_MODES)
async def test_not_ready_deleting_and_unlabelled_pods_are_never_picked(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=4, objects=served(mode, "m"))
    cluster, pods = env.cluster, env.pods
    await cluster.set_pod_ready(pods[0].name, pods[0].ip, ready=False)
    await _only(env, 1, 2, 3)
    await cluster.delete("v1", "Pod", pods[1].name)  # graceful: deletionTimestamp set, still Ready
    pod = await cluster.get("v1", "Pod", pods[1].name)
    assert pod["metadata"].get("deletionTimestamp")
    await _only(env, 2, 3)
    await cluster.patch("v1", "Pod", pods[2].name, {"metadata": {"labels": {"app": None}}})
    await _only(env, 3)
    await cluster.set_pod_ready(pods[0].name, pods[0].ip, ready=True)
    await _only(env, 0, 3)


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_new_ready_pod_is_picked_up(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=2, objects=served(mode, "m"))
    await env.cluster.delete("v1", "Pod", env.pods[1].name)
    await _only(env, 0)
    await env.cluster.create_ready_pod("pod-1-new", env.pods[1].ip, env.pool.labels, port=env.port)
    await _only(env, 0, 1)


@pytest.mark.parametrize("mode", CRD_MODES)  # a standalone picker has no pool object to change
async def test_pool_selector_change_resyncs(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=3, objects=served(mode, "m"))
    await env.cluster.patch("v1", "Pod", env.pods[2].name, {"metadata": {"labels": {"tier": "canary"}}})
    if mode == "v1":
        group, selector = f"{V1_POOL_GROUP}/v1", {"selector": {"matchLabels": {"tier": "canary"}}}
    else:
        group, selector = f"{V1ALPHA2_POOL_GROUP}/v1alpha2", {"selector": {"tier": "canary"}}
    await env.cluster.patch(group, "InferencePool", POOL, {"spec": selector})
    await _only(env, 2)
