"""The autoscaler's Grafana dashboard and alert rules query only series the autoscaler exposes.

Every ``wva_*`` name in ``manifests/observability/autoscaler-dashboard.json`` (panels and
variables) and ``autoscaler-alerts.yaml`` must appear on the autoscaler's ``/metrics`` after cycles
that make each series exist: decisions, a quota cut, an invalid ConfigMap, a failed read, and a pod
no variant owns seen through Prometheus. ``up`` is Prometheus's own series.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from autoscale_fakes import FakeCluster, PinnedSource, annotated_hpa
from prometheus_client import CollectorRegistry, generate_latest

from epp.autoscale.controller import Controller, ControllerOptions
from epp.autoscale.inputs import InputError, PodTarget
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.prometheus import PrometheusSource
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import ManualClock
from epp.telemetry.metrics import EppMetrics

OBSERVABILITY = Path(__file__).resolve().parents[2] / "manifests" / "observability"
CONFIG_NS = "workload-variant-autoscaler-system"


def _panels(panels: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def queries() -> dict[str, str]:
    dashboard = json.loads((OBSERVABILITY / "autoscaler-dashboard.json").read_text())
    out = {
        f"panel {p['title']!r} #{i}": t["expr"]
        for p in _panels(dashboard["panels"])
        for i, t in enumerate(p.get("targets", []))
    }
    out.update(
        {f"variable {v['name']}": v["definition"] for v in dashboard["templating"]["list"] if v["type"] == "query"}
    )
    rules = yaml.safe_load((OBSERVABILITY / "autoscaler-alerts.yaml").read_text())
    out.update({f"alert {r['alert']}": r["expr"] for g in rules["spec"]["groups"] for r in g["rules"]})
    return out


def names(expr: str) -> set[str]:
    return set(re.findall(r"\b(wva_[a-z_]+)", expr))


class _FailingOnce(PinnedSource):
    def __init__(self) -> None:
        super().__init__()
        self.fail = True

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> list[ReplicaMetrics]:
        if self.fail:
            self.fail = False
            raise InputError("the pods' metrics could not be read")
        return await super().collect(key, pods)


@pytest.fixture
async def prometheus_with_a_stranger() -> AsyncIterator[str]:
    async def query(request: web.Request) -> web.Response:
        hit = "kv_cache_usage_perc" in request.query["query"]
        result = [{"metric": {"pod": "orphan"}, "value": [1, "0.5"]}] if hit else []
        return web.json_response({"status": "success", "data": {"resultType": "vector", "result": result}})

    app = web.Application()
    app.router.add_get("/api/v1/query", query)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()


async def test_every_queried_series_is_exposed(prometheus_with_a_stranger: str) -> None:
    registry = CollectorRegistry()
    metrics = AutoscalerMetrics(EppMetrics(registry))
    cluster, source = FakeCluster(), _FailingOnce()
    quota = (
        "analyzers: [{type: saturation}]\nenableLimiter: true\n"
        "limiters: [{type: quota, name: q, scope: cluster, quotas: {H100: 1}}]"
    )
    cluster.configmaps[(CONFIG_NS, "wva-saturation-scaling-config")] = {
        "metadata": {"resourceVersion": "1"},
        "data": {"default": quota},
    }
    cluster.hpas = [annotated_hpa("ns", "a")]
    cluster.set_deployment("ns", "a", spec=1, template={"spec": {"nodeSelector": {"nvidia.com/gpu.product": "H100"}}})
    source.pin("ns", cluster.pod_names("ns", "a"), 0.95, 9)
    clock = ManualClock()
    controller = Controller(cluster, source, clock=clock, metrics=metrics, options=ControllerOptions())
    await controller.run_cycle()  # the read fails: collection error
    clock.advance(15)
    await controller.run_cycle()  # saturated, cut by the quota
    cluster.set_deployment("ns", "a", spec=3, template={"spec": {"nodeSelector": {"nvidia.com/gpu.product": "H100"}}})
    source.pin("ns", cluster.pod_names("ns", "a"), 0.01, 0)
    cluster.configmaps[(CONFIG_NS, "wva-saturation-scaling-config")]["data"] = {"default": "priority: -1"}
    cluster.configmaps[(CONFIG_NS, "wva-saturation-scaling-config")]["metadata"]["resourceVersion"] = "2"
    clock.advance(15)
    await controller.run_cycle()  # invalid edit (error), and a scale-down
    async with aiohttp.ClientSession() as session:
        prometheus = PrometheusSource(session, prometheus_with_a_stranger, on_unattributed=metrics.unattributed)
        await prometheus.collect(ModelKey("ns", "llama"), [])
    text = generate_latest(registry).decode()
    exposed = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}

    found = queries()
    missing = {where: sorted(names(expr) - exposed) for where, expr in found.items()}
    assert {where: n for where, n in missing.items() if n} == {}
    queried = set().union(*(names(e) for e in found.values()))
    assert len(queried) >= 25  # nearly every upstream series is on the dashboard
    assert "up{" in found["alert WVAControllerDown"]
