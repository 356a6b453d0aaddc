"""The controller under the shipped defaults (V2): variants on annotated HPAs, no VA CRD, the quota
limiter across models, Events on the declaring object, and the ``wva_*`` series upstream publishes."""

from __future__ import annotations

import pytest
from autoscale_fakes import FakeCluster, PinnedSource, annotated_hpa
from prometheus_client import CollectorRegistry

from epp.autoscale.controller import Controller, ControllerOptions
from epp.autoscale.decision import Reason
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.types import VariantKey
from epp.clock import ManualClock
from epp.telemetry.metrics import EppMetrics

H100 = {"spec": {"nodeSelector": {"nvidia.com/gpu.product": "H100"}}}
QUOTA = """\
analyzers:
  - type: saturation
enableLimiter: true
limiters:
  - {type: quota, name: h100-quota, scope: cluster, quotas: {H100: 3}}
"""
CONFIG_NS = "workload-variant-autoscaler-system"


def make(cluster: FakeCluster, source: PinnedSource) -> tuple[Controller, ManualClock, CollectorRegistry]:
    clock, registry = ManualClock(), CollectorRegistry()
    ctl = Controller(
        cluster, source, clock=clock, metrics=AutoscalerMetrics(EppMetrics(registry)), options=ControllerOptions()
    )
    return ctl, clock, registry


def saturate(cluster: FakeCluster, source: PinnedSource, ns: str, dep: str) -> None:
    source.pin(ns, cluster.pod_names(ns, dep), 0.9, 9.0)


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float | None:
    return registry.get_sample_value(name, labels)


async def test_an_annotated_hpa_without_the_va_crd() -> None:
    cluster, source = FakeCluster(), PinnedSource()  # no VariantAutoscaling CRD installed
    cluster.hpas = [annotated_hpa("ns", "llama-h100", target="llama")]
    cluster.set_deployment("ns", "llama", spec=2, template=H100)
    saturate(cluster, source, "ns", "llama")
    ctl, _, registry = make(cluster, source)
    out = await ctl.run_cycle()
    d = out[VariantKey("ns", "llama-h100")].decision
    assert d is not None and (d.current, d.target, d.reason) == (2, 3, Reason.SATURATED)
    assert cluster.scales == [] and cluster.status_patches == []  # the HPA actuates; no status to write
    labels = {"variant_name": "llama-h100", "namespace": "ns", "accelerator_type": "H100"}
    assert sample(registry, "wva_desired_replicas", **labels) == 3
    [(ns, event)] = cluster.events
    assert (ns, event["reason"], event["type"]) == ("ns", "ScaledUp", "Normal")
    assert event["involvedObject"] == {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "name": "llama-h100",
        "namespace": "ns",
        "uid": "uid-hpa-llama-h100",
    }
    assert event["message"] == "Scaled up from 2 to 3 (saturated)"


async def test_the_upstream_series_are_published() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.hpas = [annotated_hpa("ns", "a")]
    cluster.set_deployment("ns", "a", spec=2, template=H100)
    saturate(cluster, source, "ns", "a")
    ctl, _, registry = make(cluster, source)
    await ctl.run_cycle()
    model = {"variant_name": "a", "namespace": "ns", "model_name": "llama"}
    assert sample(registry, "wva_saturation_metrics_up", variant_name="a", namespace="ns") == 1
    # no KV size reported: the engine's defaults stand in for the capacity (8192 batched tokens × 0.8)
    assert sample(registry, "wva_saturation_utilization", **model, accelerator_type="H100") == pytest.approx(
        0.9, abs=1e-3
    )
    assert (sample(registry, "wva_required_capacity", **model, unit="continuous") or 0) > 0
    assert (
        sample(
            registry,
            "wva_config_info",
            analyzer_name="saturation",
            limiter_enabled="false",
            scale_to_zero_enabled="false",
        )
        == 1
    )
    assert sample(registry, "wva_config_optimization_interval_seconds") == 15
    assert sample(registry, "wva_models_processed") == 1
    assert sample(registry, "wva_optimization_duration_seconds_count", status="success") == 1
    assert sample(registry, "wva_optimizer_active", optimizer_name="cost-aware") == 1
    assert sample(registry, "wva_gpu_discovery_up") == 0
    assert sample(registry, "wva_metrics_pods_discovered", namespace="ns") == 2
    assert sample(registry, "wva_metrics_freshness_status", variant_name="a", status="fresh") == 2
    assert sample(registry, "wva_metrics_collection_duration_seconds_count", query_type="replica_metrics") == 1
    # an invalid ConfigMap edit is an error (and the last good one stays)
    cluster.configmaps[(CONFIG_NS, "wva-saturation-scaling-config")] = {
        "metadata": {"resourceVersion": "1"},
        "data": {"default": "scaleUpThreshold: 2"},
    }
    await ctl.run_cycle()
    assert sample(registry, "wva_errors_total", component="controller", error_type="invalid ConfigMap") == 1
    cluster.hpas = []
    await ctl.run_cycle()
    assert sample(registry, "wva_saturation_metrics_up", variant_name="a", namespace="ns") is None  # gone with it


async def test_the_quota_limiter_across_models() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.configmaps[(CONFIG_NS, "wva-saturation-scaling-config")] = {
        "metadata": {"resourceVersion": "1"},
        "data": {"default": QUOTA},
    }
    for ns in ("team-a", "team-b"):
        cluster.hpas.append(annotated_hpa(ns, "llama", model="llama"))
        cluster.set_deployment(ns, "llama", spec=1, template=H100)
        saturate(cluster, source, ns, "llama")
    ctl, _, registry = make(cluster, source)
    out = await ctl.run_cycle()
    a, b = out[VariantKey("team-a", "llama")].decision, out[VariantKey("team-b", "llama")].decision
    assert a is not None and b is not None
    assert (a.current, a.target, a.reason) == (1, 2, Reason.SATURATED)  # 2 H100 in use, 1 left: the first gets it
    assert (b.current, b.target, b.reason, b.limited_by) == (1, 1, Reason.QUOTA, "h100-quota")
    assert "limited by quota h100-quota (H100)" in b.message
    assert (
        sample(
            registry, "wva_decisions_limited_total", variant_name="llama", namespace="team-b", limiter_name="h100-quota"
        )
        == 1
    )
    assert [e["reason"] for ns, e in cluster.events if ns == "team-b"] == ["ResourceConstrained"]
    assert (
        sample(
            registry,
            "wva_config_info",
            analyzer_name="saturation",
            limiter_enabled="true",
            scale_to_zero_enabled="false",
        )
        == 1
    )


async def test_a_repeated_warning_is_one_event_with_a_count() -> None:
    cluster, source = FakeCluster(), PinnedSource()
    cluster.hpas = [annotated_hpa("ns", "a")]
    cluster.set_deployment("ns", "a", spec=1)  # no accelerator anywhere
    source.pin("ns", cluster.pod_names("ns", "a"), 0.5, 0.0)
    ctl, clock, registry = make(cluster, source)
    for _ in range(3):
        await ctl.run_cycle()
        clock.advance(15)
    [(_, event)] = cluster.events
    assert (event["reason"], event["type"], event["count"]) == ("AcceleratorNotResolved", "Warning", 3)
    assert (
        sample(registry, "wva_desired_replicas", variant_name="a", namespace="ns", accelerator_type="unresolved") == 1
    )
