"""End to end in the fake cluster: the seed's pending-aware scenario through an annotated HPA and through KEDA.

Under V1 (upstream's shipped ConfigMap without ``analyzers``) and V2 (the shipped ConfigMap as
is), for a variant declared on the sample HPA and on the sample ScaledObject: a load burst
saturates the pods → the autoscaler asks for one more replica → Prometheus, KEDA and the HPA
carry it to the Deployment → while that replica loads, cycles hold (no cascade) → once it is
Ready and the load still high, scaling resumes → after the burst the variant scales back down to
the scaler's minimum. The autoscaler never writes the Deployment: the HPA does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from loop_cluster import (
    A100,
    LOAD_DELAY,
    NS,
    SATURATED,
    Loop,
    deployment,
    loop_cluster,
    sample,
    upstream_v1_configmap,
)

from epp.autoscale.decision import Reason
from epp.autoscale.types import VariantKey
from epp_sim.waits import wait_until

SCALERS = {
    "hpa": ("sample-hpa.yaml", "HorizontalPodAutoscaler", "horizontalpodautoscalers.autoscaling"),
    "keda": ("sample-scaledobject.yaml", "ScaledObject", "scaledobjects.keda.sh"),
}


async def _declare(loop: Loop, scaler: str) -> tuple[VariantKey, str]:
    """The sample scaler and its Deployment (2 replicas, loaded); returns the variant and Deployment name."""
    file, kind, resource = SCALERS[scaler]
    obj = sample(file, kind)
    name = obj["spec"]["scaleTargetRef"]["name"]
    loop.store.create("deployments", deployment(name, 2), namespace=NS)
    loop.store.create(resource, obj, namespace=NS)
    await wait_until(lambda: loop.clock.sleepers == 2, timeout=5)  # both pods loading
    await loop.load_pods(name, 2)
    return VariantKey(NS, obj["metadata"]["name"]), name


def _replicas(loop: Loop, name: str) -> int:
    return int(loop.get("Deployment", name)["spec"]["replicas"])


@pytest.mark.parametrize("analyzer", ["v1", "v2"])
@pytest.mark.parametrize("scaler", ["hpa", "keda"])
async def test_burst_scales_up_through_the_scaler_waits_for_the_pending_replica_and_scales_down(
    tmp_path: Path, analyzer: str, scaler: str
) -> None:
    configmap = (
        upstream_v1_configmap() if analyzer == "v1" else sample("configmap-saturation.yaml", "ConfigMap")["data"]
    )
    async with loop_cluster(tmp_path, configmap=configmap) as loop:
        key, name = await _declare(loop, scaler)

        loop.pin(waiting=1, kv_cache_usage=0.4)  # moderate load: nothing to do
        assert await loop.cycle(key, 0) == (2, 2, Reason.STEADY)
        await loop.scale()
        assert _replicas(loop, name) == 2
        if scaler == "keda":  # KEDA made an HPA from the ScaledObject; both carry the annotations: one variant
            hpa = loop.get("horizontalpodautoscalers.autoscaling", f"keda-hpa-{key.name}")
            assert hpa["metadata"]["annotations"]["llm-d.ai/managed"] == "true"
            assert set(loop.controller.last_outcomes) == {key}

        loop.pin(**SATURATED)  # the burst
        assert await loop.cycle(key) == (2, 3, Reason.SATURATED)
        assert _replicas(loop, name) == 2  # the autoscaler only publishes
        assert loop.gauge("wva_desired_replicas", key.name) == 3
        await loop.scale()
        assert _replicas(loop, name) == 3  # the HPA acted on the gauge
        await wait_until(lambda: (loop.get("Deployment", name).get("status") or {}).get("replicas") == 3, timeout=5)

        for _ in range(4):  # the new replica loads for minutes; the load stays high; nothing cascades
            current, target, reason = await loop.cycle(key, 30)
            assert (current, target, reason) == (3, 3, Reason.PENDING)
            await loop.scale()
            assert _replicas(loop, name) == 3

        loop.clock.advance(LOAD_DELAY - 4 * 30)
        await wait_until(
            lambda: (loop.get("Deployment", name).get("status") or {}).get("readyReplicas") == 3, timeout=10
        )
        loop.pin(**SATURATED)
        assert await loop.cycle(key) == (3, 4, Reason.SATURATED)
        await loop.scale()
        assert _replicas(loop, name) == 4

        await loop.load_pods(name, 4)  # after the burst
        loop.pin(waiting=0, kv_cache_usage=0.1)
        seen = [4]
        for _ in range(4):
            current, target, reason = await loop.cycle(key)
            assert target < current and reason is Reason.SCALE_DOWN, (current, target, reason)
            await loop.scale()
            seen.append(_replicas(loop, name))
            if seen[-1] == 1:
                break
            await loop.load_pods(name, seen[-1])
        # V1 gives back one replica per cycle; V2 all the spare at once; both stop at the scaler's minimum
        assert seen == ([4, 3, 2, 1] if analyzer == "v1" else [4, 1]), seen
        current, target, _ = await loop.cycle(key)
        assert (current, target) == (1, 1)

        events = {e["reason"] for e in loop.store.list("events", namespace=NS)}
        assert {"ScaledUp", "ScaledDown"} <= events
        assert loop.gauge("wva_current_replicas", key.name) == 1
        assert A100  # the accelerator came from the Deployment's nodeSelector (gauge label above)
