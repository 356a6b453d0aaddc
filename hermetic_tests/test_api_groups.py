"""The llm-d router's API group beside GIE's, against the real picker and the fake API server.

Objectives and rewrites in a cluster serving only ``llm-d.ai``, only ``inference.networking.x-k8s.io``,
or both (merged: the llm-d.ai object wins a shared name, and the shadowed one is counted); a
configuration in either group with its own spelling of the renamed keys; the llm-d header
aliases; the llm-d Lease name. Pools are v1: objectives and rewrites need a pool object, and
v1alpha2 pools take the InferenceModel path instead.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from epp.runtime import Runtime
from epp_sim.kube_objects import LLM_D_GROUP, V1ALPHA2_POOL_GROUP, inference_objective, inference_pool, model_rewrite
from epp_sim.pytest_plugin import ClientFactory, PickerFactory, PodsFactory, PoolFactory
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.extproc_client import ExtProcClient
from epp_sim.stack.manifests import CRDS_DIR
from epp_sim.stack.pods import SimulatedPods
from epp_sim.waits import wait_until

POOL = "groups-pool"
POOL_CRD = CRDS_DIR / "inference.networking.k8s.io_inferencepools.yaml"
CRDS = {
    group: [CRDS_DIR / f"{group}_inferenceobjectives.yaml", CRDS_DIR / f"{group}_inferencemodelrewrites.yaml"]
    for group in (LLM_D_GROUP, V1ALPHA2_POOL_GROUP)
}
GROUPS = (LLM_D_GROUP, V1ALPHA2_POOL_GROUP)
# Each group's own spelling: the llm-d config names its detector under flowControl and requests
# name their objective with the llm-d header; GIE's config uses the top-level key, GIE's header.
SPELLINGS = {
    LLM_D_GROUP: ("flowControl:\n  saturationDetector: {pluginRef: strict}\n", "x-llm-d-inference-objective"),
    V1ALPHA2_POOL_GROUP: ("saturationDetector: {pluginRef: strict}\n", "x-gateway-inference-objective"),
}
CONFIG = """\
apiVersion: {group}/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- {{name: strict, type: utilization-detector, parameters: {{queueDepthThreshold: 2}}}}
schedulingProfiles:
- {{name: default, plugins: [{{pluginRef: queue-scorer}}]}}
"""
BODY = {"model": "m", "prompt": "hi"}


@dataclass
class Env:
    """A picker serving POOL, its ext_proc client and its pods."""

    runtime: Runtime
    client: ExtProcClient
    pods: SimulatedPods
    cluster: FakeCluster

    def sample(self, name: str, **labels: str) -> float:
        return self.runtime.metrics.registry.get_sample_value(name, labels) or 0.0

    def requests(self, priority: str, target: str = "m") -> float:
        """Requests the llm-d twin counted under ``priority``."""
        labels = {"model_name": "m", "target_model_name": target, "fairness_id": "default-flow", "priority": priority}
        return self.sample("llm_d_epp_request_total", **labels)

    def shadowed(self, kind: str) -> float:
        return self.sample("epp_api_group_shadowed_objects", pool=POOL, kind=kind)

    async def route(self, headers: Mapping[str, str]) -> tuple[int, str]:
        """Status, and the model the server is sent."""
        routed = await self.client.route(BODY, headers=headers)
        return routed.status, json.loads(routed.body)["model"] if routed.status == 200 else ""

    async def saturate(self) -> None:
        for pod in self.pods:
            pod.server.pin(waiting=3)
        await wait_until(lambda: all(s.metrics.waiting_queue == 3 for s in self.runtime.pools[0].datastore.endpoints()))


Start = Callable[..., Awaitable[Env]]


@pytest.fixture
def start(
    epp_cluster: FakeCluster, epp_sim_pods: PodsFactory, epp_picker: PickerFactory, epp_extproc: ClientFactory
) -> Start:
    """``await start(crds, objects, *serve_args)``: a cluster serving those CRDs, and a synced picker."""

    async def make(crds: Sequence[Path], objects: Sequence[dict[str, Any]], *args: str) -> Env:
        await epp_cluster.apply_manifests(POOL_CRD, *crds)
        pods = await epp_sim_pods(2, labels={"app": POOL}, name_prefix=POOL)
        await epp_cluster.apply_all([inference_pool("v1", POOL, {"app": POOL}, pods.port), *objects])
        picker = await epp_picker("--pool-name", POOL, "--refresh-metrics-interval=20ms", *args, seed=5)
        runtime, expected = picker.runtime, set(pods.addresses)
        await wait_until(
            lambda: runtime.ready and {e.endpoint.hostport for e in runtime.pools[0].datastore.endpoints()} == expected,
            timeout=15,
            message="picker synced",
        )
        return Env(runtime, await epp_extproc(picker), pods, epp_cluster)

    return make


@pytest.mark.parametrize("group", GROUPS)
async def test_a_cluster_and_a_config_of_one_group_with_its_spellings(start: Start, group: str, tmp_path: Path) -> None:
    detector, header = SPELLINGS[group]
    config = tmp_path / "epp-config.yaml"
    config.write_text(CONFIG.format(group=group) + detector)
    objects = [
        inference_objective("batch", -1, POOL, group=group),
        inference_objective("interactive", 7, POOL, group=group),
        model_rewrite("canary", POOL, {"m-v2": 1}, model="m", group=group),
    ]
    env = await start(CRDS[group], objects, "--config-file", str(config))
    (pool,) = env.runtime.pools
    loaded = pool.config
    deprecated = {n.setting for n in loaded.notices if n.deprecated}
    assert deprecated == (set() if group == LLM_D_GROUP else {"apiVersion", "saturationDetector"})

    assert await env.route({header: "batch"}) == (200, "m-v2")  # the group's rewrite, the group's objective
    assert env.requests("-1", target="m-v2") == 1
    await env.saturate()  # queue 3 ≥ the configured detector's 2 (the default detector would say 5)
    assert (await env.route({header: "batch"}))[0] == 429
    assert await env.route({header: "interactive"}) == (200, "m-v2")
    assert env.shadowed("InferenceObjective") == 0


async def test_both_groups_merge_and_llm_d_wins_a_shared_name(start: Start) -> None:
    objects = [
        inference_objective("shared", -1, POOL, group=V1ALPHA2_POOL_GROUP),
        inference_objective("shared", 5, POOL, group=LLM_D_GROUP),
        inference_objective("legacy-only", -2, POOL, group=V1ALPHA2_POOL_GROUP),
        inference_objective("new-only", 3, POOL, group=LLM_D_GROUP),
        model_rewrite("canary", POOL, {"m-old": 1}, model="m", group=V1ALPHA2_POOL_GROUP),
        model_rewrite("canary", POOL, {"m-new": 1}, model="m", group=LLM_D_GROUP),
    ]
    env = await start([*CRDS[LLM_D_GROUP], *CRDS[V1ALPHA2_POOL_GROUP]], objects)
    objective = "x-llm-d-inference-objective"
    for name, priority in (("shared", "5"), ("legacy-only", "-2"), ("new-only", "3")):
        assert await env.route({objective: name}) == (200, "m-new")
        assert env.requests(priority, target="m-new") == 1, name
    assert env.shadowed("InferenceObjective") == 1 and env.shadowed("InferenceModelRewrite") == 1

    # The winner goes: the legacy object of that name takes its place, and nothing is shadowed.
    await env.cluster.delete(f"{LLM_D_GROUP}/v1alpha2", "InferenceObjective", "shared")
    await env.cluster.delete(f"{LLM_D_GROUP}/v1alpha2", "InferenceModelRewrite", "canary")
    datastore = env.runtime.pools[0].datastore
    await wait_until(lambda: (o := datastore.objective("shared")) is not None and o.priority == -1)
    await wait_until(lambda: env.shadowed("InferenceModelRewrite") == 0)
    assert await env.route({"x-gateway-inference-objective": "shared"}) == (200, "m-old")
    assert env.requests("-1", target="m-old") == 1
    assert env.shadowed("InferenceObjective") == 0


async def test_the_llm_d_header_wins_over_the_gie_one(start: Start) -> None:
    objects = [inference_objective(n, p, POOL, group=LLM_D_GROUP) for n, p in (("new", 4), ("old", -3))]
    env = await start(CRDS[LLM_D_GROUP], objects)
    both = {"x-llm-d-inference-objective": "new", "x-gateway-inference-objective": "old"}
    rewrite = {"x-llm-d-model-name-rewrite": "m-llm-d", "x-gateway-model-name-rewrite": "m-gie"}
    routed = await env.client.route(BODY, headers={**both, **rewrite})
    assert routed.status == 200 and json.loads(routed.body)["model"] == "m-llm-d"
    assert env.requests("4", target="m-llm-d") == 1
    echoed = {k.lower() for k in routed.headers}
    assert not echoed & {*both, *rewrite}  # no spelling of a control header reaches the model server


async def test_the_llm_d_lease_name(epp_pool: PoolFactory) -> None:
    args = ["--ha-enable-leader-election", "--ha-lease-name-style=llm-d"]
    pool = await epp_pool("v1", pods=1, picker_args=args)  # ready only once it holds the lease
    lease = await pool.cluster.get("coordination.k8s.io/v1", "Lease", f"epp-default-{pool.pool.name}.llm-d.ai")
    assert lease["spec"]["holderIdentity"]
