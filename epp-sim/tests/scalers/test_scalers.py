"""The fake cluster's scalers: the stand-in Prometheus (target labels, queries it refuses), the HPA
controller (External metrics, tolerance, behavior, bounds, status) and KEDA (its HPA, activation)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web

from epp.clock import ManualClock
from epp_sim.apiserver.store import Store
from epp_sim.scalers import SCALED_OBJECT_CRD, ClusterScalers, PrometheusStandIn, ScrapeTarget
from epp_sim.scalers.prometheus import QueryError

NS = "llm"


class Gauge:
    """A /metrics page serving ``wva_desired_replicas`` per variant, as the autoscaler would."""

    def __init__(self) -> None:
        self.values: dict[str, float] = {}

    async def handle(self, _: web.Request) -> web.Response:
        lines = ["# TYPE wva_desired_replicas gauge"]
        lines += [
            f'wva_desired_replicas{{variant_name="{v}",namespace="{NS}",accelerator_type="H100"}} {n}'
            for v, n in self.values.items()
        ]
        return web.Response(text="\n".join(lines) + "\n")


@pytest.fixture
async def page() -> AsyncIterator[tuple[Gauge, str]]:
    gauge = Gauge()
    app = web.Application()
    app.router.add_get("/metrics", gauge.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield gauge, f"http://127.0.0.1:{runner.addresses[0][1]}/metrics"
    finally:
        await runner.cleanup()


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as s:
        yield s


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "i"}]}},
        },
    }


def hpa(
    name: str, *, low: int = 1, high: int = 10, target: Mapping[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    metric = {
        "name": "wva_desired_replicas",
        "selector": {"matchLabels": {"variant_name": name, "exported_namespace": NS}},
    }
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
            "minReplicas": low,
            "maxReplicas": high,
            "metrics": [
                {
                    "type": "External",
                    "external": {
                        "metric": metric,
                        "target": dict(target or {"type": "AverageValue", "averageValue": "1"}),
                    },
                }
            ],
            **spec,
        },
    }


def replicas(store: Store, name: str) -> int:
    return int(store.get("Deployment", name, namespace=NS)["spec"]["replicas"])


def conditions(store: Store, kind: str, name: str) -> dict[str, str]:
    status = store.get(kind, name, namespace=NS).get("status") or {}
    return {c["type"]: f"{c['status']}/{c['reason']}" for c in status.get("conditions") or ()}


async def test_prometheus_target_labels_and_queries(session: aiohttp.ClientSession, page: tuple[Gauge, str]) -> None:
    gauge, url = page
    gauge.values = {"a": 3, "b": 1}
    prom = PrometheusStandIn(session, [ScrapeTarget(url, {"namespace": "wva-system", "job": "wva"})])
    await prom.scrape()
    [(labels, value)] = prom.select("wva_desired_replicas", {"variant_name": "a"})
    assert (labels["exported_namespace"], labels["namespace"], labels["job"], value) == (NS, "wva-system", "wva", 3)
    assert prom.query('wva_desired_replicas{variant_name="a",exported_namespace="llm"}') == 3
    assert prom.query('sum(wva_desired_replicas{exported_namespace="llm"})') == 4
    assert prom.query('wva_desired_replicas{variant_name="gone"}') == 0
    with pytest.raises(QueryError, match="returned 2 series"):
        prom.query("wva_desired_replicas")
    with pytest.raises(QueryError, match="unsupported label matcher"):
        prom.query('wva_desired_replicas{variant_name=~"a.*"}')
    with pytest.raises(QueryError, match="unsupported query"):
        prom.query("rate(wva_desired_replicas[1m])")
    honored = PrometheusStandIn(session, [ScrapeTarget(url, {"namespace": "wva-system"}, honor_labels=True)])
    await honored.scrape()
    assert honored.query('wva_desired_replicas{variant_name="b",namespace="llm"}') == 1


async def test_hpa_follows_the_gauge_within_bounds(session: aiohttp.ClientSession, page: tuple[Gauge, str]) -> None:
    gauge, url = page
    clock = ManualClock()
    store = Store()
    store.create("namespaces", {"metadata": {"name": NS}})
    store.create("deployments", deployment("a", 2), namespace=NS)
    store.create("horizontalpodautoscalers.autoscaling", hpa("a", high=5), namespace=NS)
    scalers = ClusterScalers(store, PrometheusStandIn(session, [ScrapeTarget(url, {"namespace": "wva"})]), clock=clock)

    gauge.values = {"a": 4}
    await scalers.sync()
    assert replicas(store, "a") == 4  # AverageValue 1: the replica count is the gauge
    status = store.get("HorizontalPodAutoscaler", "a", namespace=NS)["status"]
    assert (status["currentReplicas"], status["desiredReplicas"]) == (2, 4) and "lastScaleTime" in status
    gauge.values = {"a": 9}
    await scalers.sync()
    assert (
        replicas(store, "a") == 5
        and conditions(store, "HorizontalPodAutoscaler", "a")["ScalingActive"] == "True/ValidMetricFound"
    )
    # scale-down: the default behavior keeps the highest recommendation of the last 300 s
    gauge.values = {"a": 2}
    clock.advance(15)
    await scalers.sync()
    assert replicas(store, "a") == 5
    clock.advance(300)
    await scalers.sync()
    assert replicas(store, "a") == 2
    gauge.values = {}
    await scalers.sync()
    assert replicas(store, "a") == 2
    assert conditions(store, "HorizontalPodAutoscaler", "a")["ScalingActive"].startswith(
        "False/FailedGetExternalMetric"
    )


async def test_hpa_tolerance_value_targets_rate_policies_and_a_target_at_zero(
    session: aiohttp.ClientSession, page: tuple[Gauge, str]
) -> None:
    gauge, url = page
    clock = ManualClock()
    store = Store()
    store.create("namespaces", {"metadata": {"name": NS}})
    fast = {"scaleUp": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}
    for name, spec in (
        ("tol", {}),
        ("val", {"target": {"type": "Value", "value": "2"}}),
        ("slow", {"behavior": fast}),
        ("zero", {}),
    ):
        store.create("deployments", deployment(name, 0 if name == "zero" else 10), namespace=NS)
        store.create("horizontalpodautoscalers.autoscaling", hpa(name, high=40, **spec), namespace=NS)
    scalers = ClusterScalers(store, PrometheusStandIn(session, [ScrapeTarget(url, {"namespace": "wva"})]), clock=clock)
    gauge.values = {"tol": 10.9, "val": 3, "slow": 20, "zero": 5}
    await scalers.sync()
    assert replicas(store, "tol") == 10  # within 10% of the target: no change
    assert replicas(store, "val") == 15  # Value target: ceil(10 · 3 / 2)
    assert replicas(store, "slow") == 11  # one pod per minute
    assert replicas(store, "zero") == 0  # minReplicas 1 and the target at 0: scaling disabled
    assert conditions(store, "HorizontalPodAutoscaler", "zero")["ScalingActive"] == "False/ScalingDisabled"
    clock.advance(61)
    await scalers.sync()
    assert replicas(store, "slow") == 12


async def test_keda_makes_the_hpa_activates_and_deactivates(
    tmp_path: Path, session: aiohttp.ClientSession, page: tuple[Gauge, str]
) -> None:
    gauge, url = page
    clock = ManualClock()
    store = Store(clock=clock)
    store.create("customresourcedefinitions", yaml.safe_load(SCALED_OBJECT_CRD.read_text()))
    store.create("namespaces", {"metadata": {"name": NS}})
    store.create("deployments", deployment("so", 0), namespace=NS)
    query = 'wva_desired_replicas{variant_name="so",exported_namespace="llm"}'
    scaled = {
        "metadata": {"name": "so", "namespace": NS, "annotations": {"llm-d.ai/managed": "true"}},
        "spec": {
            "scaleTargetRef": {"name": "so"},
            "minReplicaCount": 0,
            "maxReplicaCount": 6,
            "cooldownPeriod": 60,
            "triggers": [
                {"type": "prometheus", "metadata": {"query": query, "threshold": "1", "activationThreshold": "0"}}
            ],
        },
    }
    store.create("scaledobjects.keda.sh", scaled, namespace=NS)
    scalers = ClusterScalers(store, PrometheusStandIn(session, [ScrapeTarget(url, {"namespace": "wva"})]), clock=clock)

    gauge.values = {"so": 0}
    await scalers.sync()
    hpa_obj = store.get("HorizontalPodAutoscaler", "keda-hpa-so", namespace=NS)
    assert hpa_obj["metadata"]["annotations"] == {"llm-d.ai/managed": "true"}
    assert hpa_obj["metadata"]["ownerReferences"][0]["kind"] == "ScaledObject"
    assert (hpa_obj["spec"]["minReplicas"], hpa_obj["spec"]["maxReplicas"]) == (1, 6)
    assert hpa_obj["spec"]["metrics"][0]["external"]["metric"]["name"] == "s0-prometheus"
    assert replicas(store, "so") == 0 and conditions(store, "ScaledObject", "so")["Active"] == "False/ScalerNotActive"

    gauge.values = {"so": 3}
    await scalers.sync()  # activation from zero, then the HPA takes it to the metric
    assert replicas(store, "so") == 3 and conditions(store, "ScaledObject", "so")["Active"] == "True/ScalerActive"
    assert store.get("ScaledObject", "so", namespace=NS)["status"]["hpaName"] == "keda-hpa-so"

    gauge.values = {"so": 0}
    clock.advance(30)
    await scalers.sync()
    assert replicas(store, "so") > 0  # inside the cooldown
    clock.advance(31)
    await scalers.sync()
    assert replicas(store, "so") == 0

    other = {
        **scaled,
        "metadata": {"name": "cpu", "namespace": NS},
        "spec": {**scaled["spec"], "triggers": [{"type": "cpu", "metadata": {"value": "50"}}]},
    }
    store.create("scaledobjects.keda.sh", other, namespace=NS)
    await scalers.sync()
    assert conditions(store, "ScaledObject", "cpu")["Ready"] == "False/TriggerNotSimulated"
