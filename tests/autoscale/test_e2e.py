"""End to end in the fake cluster: fake API server (over HTTP, through kr8s) + simulated
Deployments whose pods take time to load + vLLM simulators with pinned load + `epp autoscale`.

Load saturates the pods → one replica is added → while it loads, cycles do not add another (no
cascade) → once it is Ready and load is still high, scaling resumes. Time is a ManualClock shared
by the controller and the model-load delay, so cycles are driven explicitly.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
import yaml
from prometheus_client import CollectorRegistry

from epp.autoscale.analysis import Reason
from epp.autoscale.controller import Controller, ControllerOptions
from epp.autoscale.inputs import ScrapeSource
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.resources import KubeCluster
from epp.autoscale.types import VariantKey
from epp.clock import ManualClock
from epp.kube.client import close_api, make_api
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.stability import wait_stable
from epp_sim.waits import wait_until
from epp_sim.workloads import WorkloadsController

CRD = Path(__file__).parents[2] / "manifests" / "autoscaler" / "crd.yaml"
NS = "llm"
LOAD_DELAY = 300.0
KEY = VariantKey(NS, "llama-a100")
SATURATED = {"waiting": 9, "kv_cache_usage": 0.9}


@dataclass
class Env:
    api_server: RunningApiServer
    workloads: WorkloadsController
    cluster: KubeCluster
    controller: Controller
    clock: ManualClock
    registry: CollectorRegistry

    @property
    def store(self):  # type: ignore[no-untyped-def]
        return self.api_server.server.store

    def deployment(self) -> dict:  # type: ignore[type-arg]
        return self.store.get("deployments", "llama-a100", namespace=NS)  # type: ignore[no-any-return]

    def va_status(self) -> dict:  # type: ignore[type-arg]
        return self.store.get("variantautoscalings.llmd.ai", "llama-a100", namespace=NS).get("status") or {}  # type: ignore[no-any-return]

    def saturate_ready_pods(self) -> None:
        for server in self.workloads.servers(NS).values():
            server.pin(**SATURATED)

    async def cycle(self, advance: float = 30.0) -> tuple[int, int, Reason]:
        self.clock.advance(advance)
        outcome = (await self.controller.run_cycle())[KEY]
        assert outcome.decision is not None, outcome.error
        assert not outcome.error, outcome.error
        d = outcome.decision
        return d.current, d.target, d.reason


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    clock = ManualClock()
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api_server:
        store = api_server.server.store
        store.create("customresourcedefinitions", yaml.safe_load(CRD.read_text()))
        store.create("namespaces", {"metadata": {"name": NS}})
        workloads = WorkloadsController(store, clock=clock, load_delay=LOAD_DELAY, port=0, first_host=120)
        async with workloads:
            api = await make_api(str(api_server.kubeconfig))
            session = aiohttp.ClientSession()
            try:
                cluster = KubeCluster(api)
                registry = CollectorRegistry()
                controller = Controller(
                    cluster,
                    ScrapeSource(session, clock),
                    clock=clock,
                    metrics=AutoscalerMetrics(registry),
                    options=ControllerOptions(actuate=True, pending_timeout=3600),
                )
                yield Env(api_server, workloads, cluster, controller, clock, registry)
            finally:
                await session.close()
                await close_api(api)


def _deployment(replicas: int) -> dict:  # type: ignore[type-arg]
    return {
        "metadata": {"name": "llama-a100", "namespace": NS},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": "llama-a100"}},
            "template": {
                "metadata": {"labels": {"app": "llama-a100"}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm",
                            "args": ["--model", "llama"],
                            "ports": [{"containerPort": 8000}],
                        }
                    ]
                },
            },
        },
    }


async def test_saturation_adds_one_replica_and_waits_for_it(env: Env) -> None:
    env.store.create("deployments", _deployment(2), namespace=NS)
    env.store.create(
        "variantautoscalings.llmd.ai",
        {
            "apiVersion": "llmd.ai/v1alpha1",
            "kind": "VariantAutoscaling",
            "metadata": {
                "name": "llama-a100",
                "namespace": NS,
                "labels": {"inference.optimization/acceleratorName": "A100"},
            },
            "spec": {
                "scaleTargetRef": {"kind": "Deployment", "name": "llama-a100"},
                "modelID": "llama",
                "variantCost": "30",
            },
        },
        namespace=NS,
    )
    # the initial pods load; the stability gate holds the test until nothing is in transition
    await wait_until(lambda: env.clock.sleepers == 2, timeout=5)
    env.clock.advance(LOAD_DELAY)
    await wait_stable(env.cluster, NS, ["llama-a100"], timeout=10, interval=0.02)

    # moderate load (two idle replicas would fit on one and one would be given back): steady
    for server in env.workloads.servers(NS).values():
        server.pin(waiting=1, kv_cache_usage=0.4)
    assert await env.cycle(0) == (2, 2, Reason.STEADY)

    env.saturate_ready_pods()
    assert await env.cycle() == (2, 3, Reason.SATURATED)
    assert env.deployment()["spec"]["replicas"] == 3  # through the scale subresource, over HTTP
    status = env.va_status()
    assert status["desiredOptimizedAlloc"]["numReplicas"] == 3
    assert status["desiredOptimizedAlloc"]["accelerator"] == "A100"
    await wait_until(lambda: (env.deployment().get("status") or {}).get("replicas") == 3, timeout=5)

    # the new replica is loading; load stays high; every cycle holds at 3
    for _ in range(4):
        current, target, reason = await env.cycle()
        assert (current, target, reason) == (3, 3, Reason.PENDING)
        assert env.deployment()["spec"]["replicas"] == 3
    assert "1 replica(s) not Ready" in env.va_status()["conditions"][2]["message"]
    assert (
        env.registry.get_sample_value(
            "wva_desired_replicas", {"variant_name": "llama-a100", "namespace": NS, "accelerator_type": "A100"}
        )
        == 3
    )

    # it becomes Ready (the rest of the load delay), takes its share of the load, still saturated
    env.clock.advance(LOAD_DELAY - 4 * 30)
    await wait_until(lambda: (env.deployment().get("status") or {}).get("readyReplicas") == 3, timeout=10)
    env.saturate_ready_pods()
    assert await env.cycle() == (3, 4, Reason.SATURATED)
    assert env.deployment()["spec"]["replicas"] == 4

    # relief: the load falls well below the triggers on every replica → one replica comes back
    env.clock.advance(LOAD_DELAY)
    await wait_stable(env.cluster, NS, ["llama-a100"], timeout=10, interval=0.02)
    for server in env.workloads.servers(NS).values():
        server.pin(waiting=0, kv_cache_usage=0.1)
    assert await env.cycle() == (4, 3, Reason.SCALE_DOWN)
    await wait_until(lambda: len(env.workloads.servers(NS)) == 3, timeout=5)
