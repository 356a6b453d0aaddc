"""A LeaderWorkerSet variant in the fake cluster: a replica is a group, only leaders report, the GPUs
of a whole group count against a quota, and the HPA scales the group count through the scale
subresource.

The LWS controller is not simulated: the test makes each group's pods itself (a leader with a vLLM
simulator, workers without) and sets the LeaderWorkerSet's status, as the LWS controller would.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import yaml
from prometheus_client import CollectorRegistry

from epp.autoscale.controller import DEFAULT_CONFIG_NAMESPACE, Controller, ControllerOptions
from epp.autoscale.decision import Reason
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.resources import KubeCluster
from epp.autoscale.scrape import ScrapeSource
from epp.autoscale.types import VariantKey
from epp.clock import ManualClock
from epp.kube.client import close_api, make_api
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_server import MetricsServer
from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.kube_objects import pod_status_ready
from epp_sim.modelserver.config import SimConfig
from epp_sim.modelserver.fixture import model_servers
from epp_sim.scalers import LEADER_WORKER_SET_CRD, ClusterScalers, PrometheusStandIn, ScrapeTarget

NS = "llm"
SIZE = 4  # pods per group, 1 GPU each
QUOTA = """\
analyzers:
  - name: saturation
enableLimiter: true
limiters:
  - {type: quota, name: h100, scope: cluster, quotas: {H100: 11}}
"""


def template(role: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "wide", "llm-d.ai/role": role}},
        "spec": {
            "nodeSelector": {"nvidia.com/gpu.product": "H100"},
            "containers": [
                {"name": "vllm", "image": "vllm/vllm-openai", "resources": {"requests": {"nvidia.com/gpu": "1"}}}
            ],
        },
    }


def group_pod(group: int, worker: int, ip: str, port: int) -> dict[str, Any]:
    labels = {
        "app": "wide",
        "leaderworkerset.sigs.k8s.io/name": "wide",
        "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(worker),
    }
    return {
        "metadata": {"name": f"wide-{group}" + (f"-{worker}" if worker else ""), "namespace": NS, "labels": labels},
        "spec": {"containers": [{"name": "vllm", "image": "vllm/vllm-openai", "ports": [{"containerPort": port}]}]},
    }


async def test_a_leaderworkerset_scales_in_groups(tmp_path: Path) -> None:
    clock = ManualClock()
    async with (
        running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api_server,
        model_servers(2, start=230, config=SimConfig(model="llama")) as leaders,
    ):
        store = api_server.server.store
        store.create("customresourcedefinitions", yaml.safe_load(LEADER_WORKER_SET_CRD.read_text()))
        for ns in (NS, DEFAULT_CONFIG_NAMESPACE):
            store.create("namespaces", {"metadata": {"name": ns}})
        cm = {"metadata": {"name": "wva-saturation-scaling-config"}, "data": {"default": QUOTA}}
        store.create("configmaps", cm, namespace=DEFAULT_CONFIG_NAMESPACE)
        lws = {
            "metadata": {"name": "wide", "namespace": NS},
            "spec": {
                "replicas": 2,
                "leaderWorkerTemplate": {
                    "size": SIZE,
                    "leaderTemplate": template("decode"),
                    "workerTemplate": template("decode"),
                },
            },
        }
        store.create("leaderworkersets.leaderworkerset.x-k8s.io", lws, namespace=NS)
        store.patch(
            "leaderworkersets.leaderworkerset.x-k8s.io",
            "wide",
            {"status": {"replicas": 2, "readyReplicas": 2}},
            namespace=NS,
            subresource="status",
        )
        for g, server in enumerate(leaders):
            for w in range(SIZE):  # workers report nothing (their port answers nothing here)
                pod = store.create("pods", group_pod(g, w, server.host, server.port if w == 0 else 1), namespace=NS)
                ip = server.host if w == 0 else f"127.0.0.{240 + g * SIZE + w}"
                store.patch(
                    "pods",
                    pod["metadata"]["name"],
                    {"status": pod_status_ready(ip)},
                    namespace=NS,
                    subresource="status",
                )
            server.pin(waiting=9, kv_cache_usage=0.9)
        hpa = {
            "metadata": {
                "name": "wide",
                "namespace": NS,
                "annotations": {"llm-d.ai/managed": "true", "llm-d.ai/model-id": "llama"},
            },
            "spec": {
                "scaleTargetRef": {
                    "apiVersion": "leaderworkerset.x-k8s.io/v1",
                    "kind": "LeaderWorkerSet",
                    "name": "wide",
                },
                "minReplicas": 1,
                "maxReplicas": 8,
                "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0}},
                "metrics": [
                    {
                        "type": "External",
                        "external": {
                            "metric": {
                                "name": "wva_desired_replicas",
                                "selector": {"matchLabels": {"variant_name": "wide"}},
                            },
                            "target": {"type": "AverageValue", "averageValue": "1"},
                        },
                    }
                ],
            },
        }
        store.create("horizontalpodautoscalers.autoscaling", hpa, namespace=NS)

        registry = CollectorRegistry()
        metrics = AutoscalerMetrics(EppMetrics(registry))
        server = MetricsServer(metrics)
        api = await make_api(str(api_server.kubeconfig))
        async with aiohttp.ClientSession() as session:
            try:
                port = await server.start("127.0.0.1", 0)
                controller = Controller(
                    KubeCluster(api),
                    ScrapeSource(session, clock, timeout=0.5),
                    clock=clock,
                    metrics=metrics,
                    options=ControllerOptions(),
                )
                prometheus = PrometheusStandIn(
                    session, [ScrapeTarget(f"http://127.0.0.1:{port}/metrics", {"namespace": "wva"})]
                )
                scalers = ClusterScalers(store, prometheus, clock=clock)
                out = await controller.run_cycle()
                d = out[VariantKey(NS, "wide")].decision
                assert d is not None, out
                # two groups, read through their two leaders only; saturated, but a group is 4 GPUs
                # and the quota leaves 11 − 8 = 3: not one more group
                assert (d.current, d.target, d.reason, d.limited_by) == (2, 2, Reason.QUOTA, "h100")
                assert d.signals is not None and d.signals.tokens_capacity == 2 * 8192 * 16
                # the quota raised to 12: one more group, which the HPA sets through the scale subresource
                raised = {"data": {"default": QUOTA.replace("H100: 11", "H100: 12")}}
                store.patch("configmaps", "wva-saturation-scaling-config", raised, namespace=DEFAULT_CONFIG_NAMESPACE)
                clock.advance(15)
                d = (await controller.run_cycle())[VariantKey(NS, "wide")].decision
                assert d is not None and (d.current, d.target, d.reason) == (2, 3, Reason.SATURATED)
                await scalers.sync()
                assert store.get("LeaderWorkerSet", "wide", namespace=NS)["spec"]["replicas"] == 3
                labels = {"variant_name": "wide", "namespace": NS, "accelerator_type": "H100"}
                assert registry.get_sample_value("wva_desired_replicas", labels) == 3
            finally:
                await server.stop()
                await close_api(api)
