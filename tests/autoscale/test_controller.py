"""The controller cycle against an in-memory cluster and pinned load, under V1 (a ConfigMap without
``analyzers``, upstream's opt-out) unless a test says otherwise; V2 is in test_controller_v2."""

from __future__ import annotations

import pytest
from autoscale_fakes import FakeCluster, PinnedSource, va
from prometheus_client import CollectorRegistry

from epp.autoscale.controller import Controller, ControllerOptions
from epp.autoscale.decision import Reason
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.types import VariantKey
from epp.clock import ManualClock
from epp.telemetry.metrics import EppMetrics

SATURATED = (0.9, 9.0)
IDLE = (0.0, 0.0)


V1_DEFAULT = "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\nkvSpareTrigger: 0.1\nqueueSpareTrigger: 3\n"


def make(
    cluster: FakeCluster, source: PinnedSource, *, v1: bool = True, **opts: object
) -> tuple[Controller, ManualClock, CollectorRegistry]:
    if v1:
        ns = str(opts.get("config_namespace", "workload-variant-autoscaler-system"))
        cluster.configmaps[(ns, "wva-saturation-scaling-config")] = {
            "metadata": {"resourceVersion": "v1"},
            "data": {"default": V1_DEFAULT},
        }
    clock = ManualClock()
    registry = CollectorRegistry()
    ctl = Controller(
        cluster,
        source,
        clock=clock,
        metrics=AutoscalerMetrics(EppMetrics(registry)),
        options=ControllerOptions(**opts),  # type: ignore[arg-type]
    )
    return ctl, clock, registry


def gauge(registry: CollectorRegistry, name: str, variant: str, ns: str, acc: str = "A100") -> float | None:
    return registry.get_sample_value(name, {"variant_name": variant, "namespace": ns, "accelerator_type": acc})


def saturate(
    cluster: FakeCluster, source: PinnedSource, ns: str, dep: str, load: tuple[float, float] = SATURATED
) -> None:
    source.pin(ns, cluster.pod_names(ns, dep), *load)


async def test_scale_up_publishes_status_gauges_and_actuates() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a100", cost="30", accelerator="A100"))
    cluster.add_va(va("ns", "h100", cost="50", accelerator="H100"))
    cluster.set_deployment("ns", "a100", spec=2)
    cluster.set_deployment("ns", "h100", spec=1)
    saturate(cluster, source, "ns", "a100")
    saturate(cluster, source, "ns", "h100")
    ctl, clock, registry = make(cluster, source, actuate=True)

    out = await ctl.run_cycle()

    a = out[VariantKey("ns", "a100")].decision
    assert a is not None and (a.current, a.target, a.reason) == (2, 3, Reason.SATURATED)
    assert out[VariantKey("ns", "a100")].actuated
    assert cluster.scales == [("ns", "a100", 3)]
    status = cluster.vas[VariantKey("ns", "a100")]["status"]
    alloc = status["desiredOptimizedAlloc"]
    assert (alloc["numReplicas"], alloc["accelerator"], alloc["reason"]) == (3, "A100", "saturated")
    assert alloc["lastRunTime"] == "2027-01-15T08:00:00Z"  # ManualClock wall start 1.8e9
    conds = {c["type"]: c for c in status["conditions"]}
    assert conds["OptimizationReady"]["reason"] == "Saturated"
    assert conds["MetricsAvailable"]["status"] == "True"
    assert conds["TargetResolved"]["reason"] == "TargetFound"
    assert status["actuation"] == {"applied": True}
    assert gauge(registry, "wva_desired_replicas", "a100", "ns") == 3
    assert gauge(registry, "wva_current_replicas", "a100", "ns") == 2
    assert gauge(registry, "wva_desired_ratio", "a100", "ns") == 1.5
    assert gauge(registry, "wva_desired_replicas", "h100", "ns", "H100") == 1
    assert (
        registry.get_sample_value(
            "wva_replica_scaling_total",
            {"variant_name": "a100", "namespace": "ns", "direction": "up", "reason": "saturated"},
        )
        == 1
    )


async def test_without_actuate_only_publishes() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=1)
    saturate(cluster, source, "ns", "a")
    ctl, _, registry = make(cluster, source)
    await ctl.run_cycle()
    assert cluster.scales == []
    assert cluster.deployments[("ns", "a")]["spec"]["replicas"] == 1
    assert gauge(registry, "wva_desired_replicas", "a", "ns") == 2


async def test_no_cascade_pending_then_resume() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=2)
    saturate(cluster, source, "ns", "a")
    ctl, clock, _ = make(cluster, source, actuate=True)

    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and (d.target, d.reason) == (3, Reason.SATURATED)
    # the Deployment controller created the pod; it is not Ready yet, and load stays high
    cluster.set_deployment("ns", "a", spec=3, status=3, ready=2)
    saturate(cluster, source, "ns", "a")
    for _ in range(5):
        clock.advance(30)
        d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
        assert d is not None and (d.target, d.reason) == (3, Reason.PENDING)
    assert cluster.scales == [("ns", "a", 3)]
    # the not-Ready pod is never scraped
    assert source.asked[-1][1] == ["a-rs-0", "a-rs-1"]
    # it becomes Ready; still saturated → the next replica
    cluster.set_deployment("ns", "a", spec=3, status=3, ready=3)
    saturate(cluster, source, "ns", "a")
    clock.advance(30)
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and (d.target, d.reason) == (4, Reason.SATURATED)
    assert cluster.scales == [("ns", "a", 3), ("ns", "a", 4)]


async def test_pending_timeout_unblocks_scale_up_and_says_so() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=3, status=3, ready=2)
    saturate(cluster, source, "ns", "a")
    ctl, clock, _ = make(cluster, source, actuate=True, pending_timeout=600)
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and d.reason is Reason.PENDING
    clock.advance(599)
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and d.reason is Reason.PENDING
    clock.advance(1)
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and (d.target, d.reason) == (4, Reason.TIMEOUT)
    assert "600s" in d.message
    status = cluster.vas[VariantKey("ns", "a")]["status"]
    assert {c["type"]: c["reason"] for c in status["conditions"]}["OptimizationReady"] == "Timeout"


async def test_cooldown_while_hpa_has_not_acted() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=1)
    source.pin("ns", ["a-rs-0"], *SATURATED)
    ctl, clock, _ = make(cluster, source)  # no actuation: an HPA would act on the gauge
    await ctl.run_cycle()
    source.pin("ns", ["a-rs-0"], *IDLE)
    clock.advance(30)
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and (d.current, d.target, d.reason) == (1, 2, Reason.COOLDOWN)


async def test_same_model_and_deployment_name_in_two_namespaces_are_independent() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    for ns in ("team-a", "team-b"):
        cluster.add_va(va(ns, "decode", model="llama"))
        cluster.set_deployment(ns, "decode", spec=2)
    saturate(cluster, source, "team-a", "decode")
    saturate(cluster, source, "team-b", "decode", IDLE)
    ctl, _, registry = make(cluster, source, actuate=True)

    out = await ctl.run_cycle()

    a = out[VariantKey("team-a", "decode")].decision
    b = out[VariantKey("team-b", "decode")].decision
    assert a is not None and (a.target, a.reason) == (3, Reason.SATURATED)
    assert b is not None and (b.target, b.reason) == (1, Reason.SCALE_DOWN)
    assert sorted(cluster.scales) == [("team-a", "decode", 3), ("team-b", "decode", 1)]
    assert cluster.vas[VariantKey("team-a", "decode")]["status"]["desiredOptimizedAlloc"]["numReplicas"] == 3
    assert cluster.vas[VariantKey("team-b", "decode")]["status"]["desiredOptimizedAlloc"]["numReplicas"] == 1
    assert gauge(registry, "wva_desired_replicas", "decode", "team-a") == 3
    assert gauge(registry, "wva_desired_replicas", "decode", "team-b") == 1
    # each group read only its own namespace's pods
    assert sorted((k.namespace, pods) for k, pods in source.asked) == [
        ("team-a", ["decode-rs-0", "decode-rs-1"]),
        ("team-b", ["decode-rs-0", "decode-rs-1"]),
    ]


async def test_foreign_and_orphan_pods_are_ignored() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=1)
    ready = {"podIP": "10.1.1.1", "conditions": [{"type": "Ready", "status": "True"}]}
    cluster.extra_pods = [
        # owned by a ReplicaSet of a Deployment that no longer exists
        {"metadata": {"namespace": "ns", "name": "gone-rs-0", "labels": {"app": "a"},
                      "ownerReferences": [{"kind": "ReplicaSet", "name": "gone-rs", "controller": True}]},
         "status": ready},
        # owned by something else entirely
        {"metadata": {"namespace": "ns", "name": "job-0", "labels": {"app": "a"},
                      "ownerReferences": [{"kind": "Job", "name": "job", "controller": True}]},
         "status": ready},
        # no owner: the Deployment's selector decides
        {"metadata": {"namespace": "ns", "name": "bare", "labels": {"app": "a"}}, "status": ready},
        {"metadata": {"namespace": "ns", "name": "other", "labels": {"app": "b"}}, "status": ready},
    ]  # fmt: skip
    ctl, _, _ = make(cluster, source)
    await ctl.run_cycle()
    assert source.asked == [(source.asked[0][0], ["a-rs-0", "bare"])]


async def test_invalid_va_gets_a_condition_and_others_still_run() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    bad = va("ns", "bad")
    bad["spec"]["scaleTargetRef"]["kind"] = "StatefulSet"
    cluster.add_va(bad)
    cluster.add_va(va("ns", "good"))
    cluster.set_deployment("ns", "good", spec=1)
    saturate(cluster, source, "ns", "good")
    ctl, _, _ = make(cluster, source)
    out = await ctl.run_cycle()
    assert "only Deployment and LeaderWorkerSet are supported" in out[VariantKey("ns", "bad")].error
    cond = cluster.vas[VariantKey("ns", "bad")]["status"]["conditions"][0]
    assert (cond["type"], cond["status"], cond["reason"]) == ("TargetResolved", "False", "InvalidSpec")
    good = out[VariantKey("ns", "good")].decision
    assert good is not None and good.target == 2


async def test_missing_deployment_and_missing_accelerator() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "orphan"))
    cluster.add_va(va("ns", "noacc", accelerator=""))
    cluster.set_deployment("ns", "noacc", spec=1)
    saturate(cluster, source, "ns", "noacc")
    ctl, _, registry = make(cluster, source)
    out = await ctl.run_cycle()
    assert "Deployment ns/orphan not found" in out[VariantKey("ns", "orphan")].error
    status = cluster.vas[VariantKey("ns", "noacc")]["status"]
    assert "desiredOptimizedAlloc" not in status
    assert {c["type"]: c["reason"] for c in status["conditions"]}["OptimizationReady"] == "AcceleratorMissing"
    # the scaling signal is never withheld (upstream v0.9): the accelerator label says "unresolved"
    assert gauge(registry, "wva_desired_replicas", "noacc", "ns", "unresolved") == 2
    warnings = [e for _, e in cluster.events if e["reason"] == "AcceleratorNotResolved"]
    assert [(e["type"], e["involvedObject"]["name"]) for e in warnings] == [("Warning", "noacc")]


async def test_configmap_thresholds_per_namespace_and_last_good_kept() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=1)
    source.pin("ns", ["a-rs-0"], 0.6, 0.0)  # spare 0.2 at the default 0.8 threshold: steady
    ctl, _, _ = make(cluster, source, config_namespace="wva")
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and d.reason is Reason.STEADY
    # a namespace-local map with a 0.65 threshold: spare 0.05 < 0.1 → scale up
    cluster.configmaps[("ns", "wva-saturation-scaling-config")] = {
        "metadata": {"resourceVersion": "1"},
        "data": {"default": "kvCacheThreshold: 0.65"},
    }
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and d.reason is Reason.SATURATED
    # an invalid edit is rejected; the last good map stays in force
    cluster.configmaps[("ns", "wva-saturation-scaling-config")] = {
        "metadata": {"resourceVersion": "2"},
        "data": {"default": "kvCacheThreshold: 7"},
    }
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and d.signals is not None and d.signals.required == 1.0  # the 0.65 map: scale-up wanted


async def test_scale_to_zero_when_idle_and_enabled() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a", minReplicas=0))
    cluster.set_deployment("ns", "a", spec=1)
    source.pin("ns", ["a-rs-0"], *IDLE)
    source.idle_answer = True
    ctl, _, _ = make(cluster, source, actuate=True)
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and d.reason is Reason.STEADY  # scale-to-zero not enabled
    cluster.configmaps[("workload-variant-autoscaler-system", "wva-model-scale-to-zero-config")] = {
        "metadata": {"resourceVersion": "1"},
        "data": {"llama": "model_id: llama\nenable_scale_to_zero: true\nretention_period: 2m"},
    }
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and (d.target, d.reason) == (0, Reason.IDLE)
    assert "120s" in d.message
    assert cluster.scales == [("ns", "a", 0)]
    cluster.set_deployment("ns", "a", spec=0)
    d = (await ctl.run_cycle())[VariantKey("ns", "a")].decision
    assert d is not None and d.reason is Reason.INACTIVE
    assert cluster.scales == [("ns", "a", 0)]


async def test_failed_status_write_does_not_stop_others() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a", model="m1"))
    cluster.add_va(va("ns", "b", model="m2"))
    for n in "ab":
        cluster.set_deployment("ns", n, spec=1)
        saturate(cluster, source, "ns", n)
    cluster.fail_status_for = {VariantKey("ns", "a")}
    ctl, _, _ = make(cluster, source, actuate=True)
    out = await ctl.run_cycle()
    assert "status update failed" in out[VariantKey("ns", "a")].error
    assert cluster.vas[VariantKey("ns", "b")]["status"]["desiredOptimizedAlloc"]["numReplicas"] == 2
    assert sorted(cluster.scales) == [("ns", "a", 2), ("ns", "b", 2)]


async def test_deleted_va_drops_its_gauges() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=1)
    saturate(cluster, source, "ns", "a")
    ctl, _, registry = make(cluster, source)
    await ctl.run_cycle()
    assert gauge(registry, "wva_desired_replicas", "a", "ns") == 2
    del cluster.vas[VariantKey("ns", "a")]
    await ctl.run_cycle()
    assert gauge(registry, "wva_desired_replicas", "a", "ns") is None


async def test_run_loop_cycles_on_the_clock() -> None:
    from epp.tasks import cancel_and_wait, start_guarded
    from epp_sim.waits import wait_until

    cluster, source = FakeCluster(), PinnedSource()
    cluster.add_va(va("ns", "a"))
    cluster.set_deployment("ns", "a", spec=1)
    saturate(cluster, source, "ns", "a")
    ctl, clock, _ = make(cluster, source, interval=30)
    task = start_guarded(ctl.run(), name="test-autoscaler-loop")
    try:
        await wait_until(lambda: clock.sleepers == 1, timeout=5)
        assert len(source.asked) == 1
        clock.advance(30)
        await wait_until(lambda: len(source.asked) == 2 and clock.sleepers == 1, timeout=5)
    finally:
        await cancel_and_wait(task)


@pytest.mark.parametrize("bad", [{"interval": 0}, {"pending_timeout": -1}, {"scrape_port": 0}])
def test_options_validated(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="must be"):
        ControllerOptions(**bad)  # type: ignore[arg-type]
