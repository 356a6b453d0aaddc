"""The whole autoscaling loop in the fake cluster, driven by a manual clock.

Fake API server (over HTTP, through kr8s) + simulated Deployments whose pods take time to load +
vLLM simulators with pinned load + ``epp autoscale``'s controller (scraping the pods, its
``/metrics`` served over HTTP) + the cluster's scalers: a stand-in Prometheus scraping that
``/metrics`` as a ServiceMonitor would, KEDA, and the HPA controller. A cycle is explicit: the
autoscaler decides and publishes ``wva_desired_replicas``, then :meth:`Loop.scale` lets Prometheus,
KEDA and the HPA act on it, exactly the path saturation → gauge → HPA → Deployment → pods.
"""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
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
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.scalers import SCALED_OBJECT_CRD, ClusterScalers, PrometheusStandIn, ScrapeTarget
from epp_sim.stability import wait_stable
from epp_sim.waits import wait_until
from epp_sim.workloads import WorkloadsController

MANIFESTS = Path(__file__).parents[2] / "manifests" / "autoscaler"
NS = "llm-production"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
LOAD_DELAY = 300.0
SATURATED = {"waiting": 9, "kv_cache_usage": 0.9}
A100 = "NVIDIA-A100-SXM4-80GB"


def sample(name: str, kind: str) -> dict[str, Any]:
    """The object of ``kind`` in ``manifests/autoscaler/<name>``."""
    docs = yaml.safe_load_all((MANIFESTS / name).read_text())
    return next(d for d in docs if d["kind"] == kind)


def upstream_v1_configmap() -> dict[str, str]:
    """The shipped ConfigMap's default entry without ``analyzers``: upstream's opt-out to V1."""
    data = sample("configmap-saturation.yaml", "ConfigMap")["data"]
    default = yaml.safe_load(data["default"])
    default.pop("analyzers")
    return {**data, "default": yaml.safe_dump(default)}


def deployment(name: str, replicas: int) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "nodeSelector": {"nvidia.com/gpu.product": A100},
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm/vllm-openai",
                            "args": ["--model", MODEL],
                            "ports": [{"containerPort": 8000}],
                            "resources": {"requests": {"nvidia.com/gpu": "1"}},
                        }
                    ],
                },
            },
        },
    }


@dataclass
class Loop:
    api_server: RunningApiServer
    workloads: WorkloadsController
    cluster: KubeCluster
    controller: Controller
    scalers: ClusterScalers
    clock: ManualClock
    registry: CollectorRegistry

    @property
    def store(self) -> Any:
        return self.api_server.server.store

    def get(self, kind: str, name: str) -> Mapping[str, Any]:
        return self.store.get(kind, name, namespace=NS)  # type: ignore[no-any-return]

    def pin(self, **load: float) -> None:
        for server in self.workloads.servers(NS).values():
            server.pin(**load)

    async def cycle(self, key: VariantKey, advance: float = 15.0) -> tuple[int, int, Reason]:
        """Advance the clock, run one autoscaler cycle; ``(current, target, reason)`` of ``key``."""
        self.clock.advance(advance)
        outcome = (await self.controller.run_cycle())[key]
        assert outcome.decision is not None and not outcome.error, outcome
        d = outcome.decision
        return d.current, d.target, d.reason

    async def scale(self) -> None:
        """Prometheus scrapes the gauge, KEDA and the HPA controller act on it."""
        await self.scalers.sync()

    def gauge(self, name: str, variant: str) -> float | None:
        return self.registry.get_sample_value(
            name, {"variant_name": variant, "namespace": NS, "accelerator_type": A100}
        )

    def _status(self, name: str) -> Mapping[str, Any]:
        return self.get("Deployment", name).get("status") or {}

    async def load_pods(self, name: str, ready: int) -> None:
        """Let every loading pod finish loading; wait until ``ready`` are Ready and nothing is in transition."""

        def loading() -> bool:  # every pod created, and each one not Ready yet waiting out its load delay
            status = self._status(name)
            created = status.get("replicas") == ready
            return created and self.clock.sleepers == ready - (status.get("readyReplicas") or 0)

        await wait_until(loading, timeout=10)
        self.clock.advance(LOAD_DELAY)
        await wait_until(lambda: self._status(name).get("readyReplicas") == ready, timeout=10)
        await wait_stable(self.cluster, NS, [name], timeout=10, interval=0.02)


@asynccontextmanager
async def loop_cluster(tmp_path: Path, *, configmap: Mapping[str, str] | None = None) -> AsyncIterator[Loop]:
    """The cluster with KEDA's CRD served, the workload namespace and (optionally) the saturation ConfigMap."""
    clock = ManualClock()
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api_server:
        store = api_server.server.store
        store.create("customresourcedefinitions", yaml.safe_load(SCALED_OBJECT_CRD.read_text()))
        for ns in (NS, DEFAULT_CONFIG_NAMESPACE):
            store.create("namespaces", {"metadata": {"name": ns}})
        if configmap is not None:
            cm = copy.deepcopy(sample("configmap-saturation.yaml", "ConfigMap"))
            cm["data"] = dict(configmap)
            store.create("configmaps", cm, namespace=DEFAULT_CONFIG_NAMESPACE)
        workloads = WorkloadsController(store, clock=clock, load_delay=LOAD_DELAY, port=0, first_host=160)
        registry = CollectorRegistry()
        metrics = AutoscalerMetrics(EppMetrics(registry))
        server = MetricsServer(metrics)
        async with workloads:
            api = await make_api(str(api_server.kubeconfig))
            session = aiohttp.ClientSession()
            try:
                port = await server.start("127.0.0.1", 0)
                target = ScrapeTarget(
                    f"http://127.0.0.1:{port}/metrics", {"namespace": DEFAULT_CONFIG_NAMESPACE, "job": "epp-autoscaler"}
                )
                cluster = KubeCluster(api)
                controller = Controller(
                    cluster,
                    ScrapeSource(session, clock),
                    clock=clock,
                    metrics=metrics,
                    options=ControllerOptions(pending_timeout=3600),
                )
                scalers = ClusterScalers(store, PrometheusStandIn(session, [target]), clock=clock)
                yield Loop(api_server, workloads, cluster, controller, scalers, clock, registry)
            finally:
                await server.stop()
                await session.close()
                await close_api(api)
