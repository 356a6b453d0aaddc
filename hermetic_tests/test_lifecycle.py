"""Pod and pool lifecycle: only Ready, live, selected pods are ever picked; changes land at once."""

from __future__ import annotations

from harness import LABELS, POOL, Env, hermetic

from epp_sim.waits import wait_until


async def _only(env: Env, *indexes: int) -> None:
    expected = {env.hostport(i) for i in indexes}
    await wait_until(lambda: env.addresses() == expected, timeout=10, message=f"endpoints == {expected}")
    for i in range(6):
        routed = await env.route({"model": "m", "prompt": f"p{i}"})
        assert routed.endpoint in expected


async def test_not_ready_deleting_and_unlabelled_pods_are_never_picked() -> None:
    async with hermetic("v1", pods=4, apiserver_options={"pod_grace_seconds": 60}) as env:
        await env.kube.set_pod_ready("pod-0", env.sims[0].host, ready=False)
        await _only(env, 1, 2, 3)
        await env.kube.delete("v1", "Pod", "pod-1")  # graceful: deletionTimestamp set, still Ready
        pod = await env.kube.get("v1", "Pod", "pod-1")
        assert pod["metadata"].get("deletionTimestamp")
        await _only(env, 2, 3)
        await env.kube.patch("v1", "Pod", "pod-2", {"metadata": {"labels": {"app": None}}})
        await _only(env, 3)
        await env.kube.set_pod_ready("pod-0", env.sims[0].host, ready=True)
        await _only(env, 0, 3)


async def test_new_ready_pod_is_picked_up() -> None:
    async with hermetic("v1", pods=2) as env:
        await env.kube.delete("v1", "Pod", "pod-1")
        await _only(env, 0)
        await env.kube.create_ready_pod("pod-1-new", env.sims[1].host, LABELS)
        await _only(env, 0, 1)


async def test_pool_selector_change_resyncs() -> None:
    async with hermetic("v1", pods=3) as env:
        await env.kube.patch("v1", "Pod", "pod-2", {"metadata": {"labels": {"tier": "canary"}}})
        await env.kube.patch(
            "inference.networking.k8s.io/v1",
            "InferencePool",
            POOL,
            {"spec": {"selector": {"matchLabels": {"tier": "canary"}}}},
        )
        await _only(env, 2)
