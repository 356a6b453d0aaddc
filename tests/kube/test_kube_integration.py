"""PoolReconcilers and StandaloneReconciler against the fake API server, with kr8s and the real Datastore."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kube_objects import model, objective, pod, pool_v1, pool_v1alpha2, rewrite, rule

from epp.datastore.store import Datastore
from epp.datastore.types import ObjectiveSpec
from epp.kube.client import Api, close_api, make_api
from epp.kube.informer import Backoff, InformerSettings
from epp.kube.manager import PoolReconcilers, StandaloneReconciler
from epp.kube.resources import (
    INFERENCE_MODEL,
    INFERENCE_MODEL_REWRITE,
    INFERENCE_OBJECTIVE,
    INFERENCE_POOL_V1,
    INFERENCE_POOL_V1ALPHA2,
    V1_GROUP,
    V1ALPHA2_GROUP,
    ResourceKind,
)
from epp.labels import parse_selector
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.waits import wait_until

CRD_DIR = Path(__file__).resolve().parents[2] / "manifests" / "crds"
FAST = InformerSettings(backoff=Backoff(initial=0.02, maximum=0.2), watch_timeout=60, request_timeout=5)
NS = "default"


def qualified(kind: ResourceKind) -> str:
    return f"{kind.plural}.{kind.group}"


class Cluster:
    """Writes to the fake API server's store, as kubelet and kubectl would."""

    def __init__(self, running: RunningApiServer) -> None:
        self.running = running
        self.server = running.server
        self.store = running.server.store

    def install_crds(self, *kinds: ResourceKind) -> None:
        wanted = {qualified(k) for k in kinds}
        for path in sorted(CRD_DIR.glob("*.yaml")):
            for doc in yaml.safe_load_all(path.read_text()):
                if doc and doc.get("kind") == "CustomResourceDefinition" and doc["metadata"]["name"] in wanted:
                    self.store.create("CustomResourceDefinition", doc)
                    wanted.discard(doc["metadata"]["name"])
        assert not wanted, f"CRDs not found in {CRD_DIR}: {wanted}"

    def add_pod(self, name: str, **kw: Any) -> None:
        obj = pod(name, **kw)
        status = obj.pop("status")
        self.store.create("Pod", obj, namespace=NS)
        self.store.patch("Pod", name, {"status": status}, namespace=NS, subresource="status")

    def set_ready(self, name: str, ready: bool) -> None:
        conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
        self.store.patch("Pod", name, {"status": {"conditions": conditions}}, namespace=NS, subresource="status")

    def set_labels(self, name: str, labels: dict[str, str | None]) -> None:
        self.store.patch("Pod", name, {"metadata": {"labels": labels}}, namespace=NS)

    def create(self, kind: ResourceKind, obj: dict[str, Any]) -> None:
        self.store.create(qualified(kind), obj, namespace=NS)

    def patch(self, kind: ResourceKind, name: str, body: dict[str, Any]) -> None:
        self.store.patch(qualified(kind), name, body, namespace=NS)

    def delete(self, kind: ResourceKind | str, name: str, **kw: Any) -> None:
        self.store.delete(qualified(kind) if isinstance(kind, ResourceKind) else kind, name, namespace=NS, **kw)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig", pod_grace_seconds=60) as running:
        yield Cluster(running)


@pytest.fixture
async def api(cluster: Cluster) -> AsyncIterator[Api]:
    a = await make_api(str(cluster.running.kubeconfig))
    yield a
    await close_api(a)


@pytest.fixture
def store() -> Datastore:
    return Datastore()


@pytest.fixture
async def v1(cluster: Cluster, api: Api, store: Datastore) -> AsyncIterator[PoolReconcilers]:
    """A v1 cluster (all CRDs) with reconcilers for pool ``pool`` running."""
    cluster.install_crds(INFERENCE_POOL_V1, INFERENCE_OBJECTIVE, INFERENCE_MODEL_REWRITE)
    manager = PoolReconcilers(api, store, pool_name="pool", namespace=NS, pool_group=V1_GROUP, settings=FAST)
    await manager.start()
    try:
        yield manager
    finally:
        await manager.stop()


def endpoints(store: Datastore) -> list[str]:
    return [s.endpoint.name for s in store.endpoints()]


async def converge(store: Datastore, expected: list[str], message: str = "") -> None:
    await wait_until(lambda: endpoints(store) == expected, message=message or f"endpoints == {expected}")


async def test_pool_appears_then_synced_with_ready_pods(
    cluster: Cluster, v1: PoolReconcilers, store: Datastore
) -> None:
    cluster.add_pod("a", ip="10.0.0.1")
    cluster.add_pod("b", ip="10.0.0.2", ready=False)
    cluster.add_pod("c", ip="10.0.0.3", labels={"app": "other"})
    await wait_until(lambda: v1.discovered.is_set() and v1.informers["Pod"].synced.is_set())
    assert not v1.synced.is_set() and not store.synced
    cluster.create(INFERENCE_POOL_V1, pool_v1(ports=(8000,)))
    await wait_until(v1.synced.is_set, message="synced after the pool appears")
    await converge(store, ["a-rank-0"])
    [state] = store.endpoints()
    assert (state.endpoint.address, state.endpoint.port) == ("10.0.0.1", 8000)


async def test_not_synced_until_every_discovered_kind_was_listed(cluster: Cluster, api: Api, store: Datastore) -> None:
    """Ready only once objectives are known: until then a request would get the wrong priority."""
    cluster.install_crds(INFERENCE_POOL_V1, INFERENCE_OBJECTIVE, INFERENCE_MODEL_REWRITE)
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    cluster.create(INFERENCE_OBJECTIVE, objective("critical", priority=1))
    cluster.add_pod("a", ip="10.0.0.1")
    prefix = f"/apis/{INFERENCE_OBJECTIVE.group_version}/namespaces/{NS}/{INFERENCE_OBJECTIVE.plural}"
    cluster.server.inject_error(500, verb="list", path_prefix=prefix, times=None)
    manager = PoolReconcilers(api, store, pool_name="pool", namespace=NS, pool_group=V1_GROUP, settings=FAST)
    await manager.start()
    try:
        await converge(store, ["a-rank-0"])
        await wait_until(lambda: cluster.server.faults.errors_served >= 3, message="objective lists failing")
        assert manager.pool is not None and manager.informers["Pod"].synced.is_set()
        assert not manager.synced.is_set() and not manager.discovered.is_set()
        cluster.server.clear_faults()
        await wait_until(manager.synced.is_set, message="synced once objectives were listed")
        assert store.objective("critical") is not None
    finally:
        await manager.stop()


async def test_pod_transitions(cluster: Cluster, v1: PoolReconcilers, store: Datastore) -> None:
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    for i, name in enumerate("abc"):
        cluster.add_pod(name, ip=f"10.0.0.{i + 1}")
    await converge(store, ["a-rank-0", "b-rank-0", "c-rank-0"])
    cluster.set_ready("a", False)
    await converge(store, ["b-rank-0", "c-rank-0"], "NotReady pod removed")
    cluster.delete("Pod", "b")  # grace period: deletionTimestamp set, pod still Ready
    await converge(store, ["c-rank-0"], "terminating pod removed")
    assert cluster.store.get("Pod", "b", namespace=NS)["metadata"]["deletionTimestamp"]
    cluster.set_labels("c", {"app": None})
    await converge(store, [], "pod that lost its label removed")
    cluster.add_pod("d", ip="10.0.0.4")
    cluster.set_ready("a", True)
    await converge(store, ["a-rank-0", "d-rank-0"], "new and re-Ready pods added")


async def test_selector_and_target_port_changes_resync(cluster: Cluster, v1: PoolReconcilers, store: Datastore) -> None:
    cluster.add_pod("a", ip="10.0.0.1", labels={"app": "vllm"})
    cluster.add_pod("b", ip="10.0.0.2", labels={"app": "sglang"})
    cluster.create(INFERENCE_POOL_V1, pool_v1(match_labels={"app": "vllm"}))
    await converge(store, ["a-rank-0"])
    cluster.patch(INFERENCE_POOL_V1, "pool", {"spec": {"selector": {"matchLabels": {"app": "sglang"}}}})
    await converge(store, ["b-rank-0"], "selector change resyncs")
    cluster.patch(INFERENCE_POOL_V1, "pool", {"spec": {"targetPorts": [{"number": 8000}, {"number": 8001}]}})
    await converge(store, ["b-rank-0", "b-rank-1"], "target-port change resyncs")
    assert [s.endpoint.port for s in store.endpoints()] == [8000, 8001]


async def test_pool_deleted_clears_and_recreated_restores(
    cluster: Cluster, v1: PoolReconcilers, store: Datastore
) -> None:
    cluster.add_pod("a", ip="10.0.0.1")
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    cluster.create(INFERENCE_OBJECTIVE, objective("critical", priority=5))
    await converge(store, ["a-rank-0"])
    await wait_until(lambda: store.objective("critical") is not None)
    cluster.delete(INFERENCE_POOL_V1, "pool")
    await wait_until(lambda: not v1.synced.is_set() and not store.synced and endpoints(store) == [])
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    await wait_until(v1.synced.is_set)
    await converge(store, ["a-rank-0"])
    assert store.objective("critical") == ObjectiveSpec("critical", NS, 5)


async def test_objectives_and_rewrites_flow(cluster: Cluster, v1: PoolReconcilers, store: Datastore) -> None:
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    cluster.create(INFERENCE_OBJECTIVE, objective("critical", priority=10))
    cluster.create(INFERENCE_OBJECTIVE, objective("elsewhere", pool="other", priority=1))
    cluster.create(
        INFERENCE_MODEL_REWRITE,
        rewrite("rw", rules=[rule(["llama"], [("llama-v2", 80), ("llama-v3", 20)]), rule([], [("default", None)])]),
    )
    await wait_until(lambda: store.objective("critical") is not None and len(store.rewrites()) == 1)
    assert store.objective("critical") == ObjectiveSpec("critical", NS, 10)
    assert store.objective("elsewhere") is None
    [rw] = store.rewrites()
    assert [r.matches for r in rw.rules] == [("llama",), ()]
    assert [(t.name, t.weight) for t in rw.rules[0].targets] == [("llama-v2", 80), ("llama-v3", 20)]
    cluster.patch(INFERENCE_OBJECTIVE, "critical", {"spec": {"priority": 20}})
    await wait_until(lambda: store.objective("critical") == ObjectiveSpec("critical", NS, 20))
    cluster.delete(INFERENCE_OBJECTIVE, "critical")
    cluster.delete(INFERENCE_MODEL_REWRITE, "rw")
    await wait_until(lambda: store.objective("critical") is None and not store.rewrites())


async def test_v1alpha2_pool_and_models(cluster: Cluster, api: Api, store: Datastore) -> None:
    cluster.install_crds(INFERENCE_POOL_V1ALPHA2, INFERENCE_MODEL)
    cluster.add_pod("a", ip="10.0.0.1", labels={"app": "vllm"})
    cluster.create(INFERENCE_POOL_V1ALPHA2, pool_v1alpha2(selector={"app": "vllm"}, port=9000))
    cluster.create(INFERENCE_MODEL, model("m", model_name="llama", criticality="Critical", targets=[("llama-a", 1)]))
    cluster.create(INFERENCE_MODEL, model("other", model_name="gpt", pool="not-ours"))
    manager = PoolReconcilers(api, store, pool_name="pool", namespace=NS, pool_group=V1ALPHA2_GROUP, settings=FAST)
    await manager.start()
    try:
        await wait_until(manager.synced.is_set)
        await converge(store, ["a-rank-0"])
        assert store.pool is not None and store.pool.is_v1alpha2 and store.pool.target_ports == (9000,)
        await wait_until(lambda: store.model("llama") is not None)
        found = store.model("llama")
        assert found is not None and found.criticality == "Critical"
        assert store.model("gpt") is None
        assert sorted(manager.informers) == [
            "InferenceModel.inference.networking.x-k8s.io",
            "InferencePool.inference.networking.x-k8s.io",
            "Pod",
        ]
    finally:
        await manager.stop()


async def test_cluster_without_optional_crds(cluster: Cluster, api: Api, store: Datastore) -> None:
    cluster.install_crds(INFERENCE_POOL_V1)
    cluster.add_pod("a", ip="10.0.0.1")
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    manager = PoolReconcilers(api, store, pool_name="pool", namespace=NS, pool_group=V1_GROUP, settings=FAST)
    await manager.start()
    try:
        await wait_until(lambda: manager.synced.is_set() and manager.discovered.is_set())
        assert sorted(manager.informers) == ["InferencePool.inference.networking.k8s.io", "Pod"]
        await converge(store, ["a-rank-0"])
    finally:
        await manager.stop()


async def test_dropped_watch_reconnects(cluster: Cluster, v1: PoolReconcilers, store: Datastore) -> None:
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    cluster.add_pod("a", ip="10.0.0.1")
    await converge(store, ["a-rank-0"])
    await wait_until(
        lambda: v1.discovered.is_set() and len(v1.informers) == 4 and all(i.watching for i in v1.informers.values()),
        message="all four watches open (pod, pool, and the two kinds discovery found)",
    )
    pods = v1.informers["Pod"]
    watches = pods.watches
    assert cluster.server.drop_watches() == 4
    await wait_until(lambda: pods.watches > watches, message="pod watch reopened")
    cluster.add_pod("b", ip="10.0.0.2")
    await converge(store, ["a-rank-0", "b-rank-0"])
    assert pods.lists == 1, "a dropped watch resumes from its resourceVersion, without relisting"


async def test_forced_410_relists_without_losing_state(cluster: Cluster, v1: PoolReconcilers, store: Datastore) -> None:
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    cluster.add_pod("a", ip="10.0.0.1")
    cluster.add_pod("b", ip="10.0.0.2")
    await converge(store, ["a-rank-0", "b-rank-0"])
    await wait_until(lambda: all(i.watching for i in v1.informers.values()), message="all watches open")
    pods = v1.informers["Pod"]
    watches = pods.watches
    cluster.server.inject_error(500, verb="watch", times=None)
    cluster.server.drop_watches()
    cluster.add_pod("c", ip="10.0.0.3")
    cluster.set_ready("a", False)
    cluster.server.store.events.compact()  # history before now is gone: re-watching gets 410
    await wait_until(lambda: pods.watches >= watches + 2, message="re-watch failing")
    assert endpoints(store) == ["a-rank-0", "b-rank-0"], "the store keeps its state while the watch is down"
    assert pods.lists == 1
    cluster.server.clear_faults()
    await converge(store, ["b-rank-0", "c-rank-0"], "relist caught up")
    assert pods.lists == 2


async def test_apiserver_restart_and_500s_keep_state(cluster: Cluster, v1: PoolReconcilers, store: Datastore) -> None:
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    cluster.create(INFERENCE_OBJECTIVE, objective("critical", priority=1))
    cluster.add_pod("a", ip="10.0.0.1")
    await converge(store, ["a-rank-0"])
    await wait_until(lambda: store.objective("critical") is not None)
    await wait_until(v1.synced.is_set, message="synced: every discovered kind listed once")
    cluster.server.inject_error(500, times=None)
    await cluster.server.stop()
    cluster.add_pod("b", ip="10.0.0.2")
    cluster.delete(INFERENCE_OBJECTIVE, "critical")
    await cluster.server.start()
    pods = v1.informers["Pod"]
    watches = pods.watches
    await wait_until(lambda: pods.watches >= watches + 2, message="retrying against 500s")
    assert endpoints(store) == ["a-rank-0"] and v1.synced.is_set() and store.objective("critical") is not None
    cluster.server.clear_faults()
    await converge(store, ["a-rank-0", "b-rank-0"], "caught up after the outage")
    await wait_until(lambda: store.objective("critical") is None)
    assert v1.synced.is_set()


async def test_api_server_down_at_start(cluster: Cluster, api: Api, store: Datastore) -> None:
    cluster.install_crds(INFERENCE_POOL_V1)
    cluster.create(INFERENCE_POOL_V1, pool_v1())
    cluster.add_pod("a", ip="10.0.0.1")
    await cluster.server.stop()
    manager = PoolReconcilers(api, store, pool_name="pool", namespace=NS, pool_group=V1_GROUP, settings=FAST)
    await manager.start()
    try:
        assert not manager.synced.is_set()
        await cluster.server.start()
        await wait_until(manager.synced.is_set, message="synced once the API server is back")
        await converge(store, ["a-rank-0"])
        await wait_until(manager.discovered.is_set)
    finally:
        await manager.stop()


async def test_standalone_watches_pods_only(cluster: Cluster, api: Api, store: Datastore) -> None:
    cluster.add_pod("a", ip="10.0.0.1", labels={"app": "vllm", "role": "decode"})
    cluster.add_pod("b", ip="10.0.0.2", labels={"app": "vllm"})
    reconciler = StandaloneReconciler(
        api,
        store,
        selector=parse_selector("app=vllm,role=decode"),
        target_ports=(8000, 8001),
        namespace=NS,
        pool_name="vllm-llama",
        settings=FAST,
    )
    await reconciler.start()
    try:
        assert store.pool == reconciler.pool and store.pool.name == "vllm-llama"
        await wait_until(reconciler.synced.is_set)
        await converge(store, ["a-rank-0", "a-rank-1"])
        cluster.set_labels("b", {"role": "decode"})
        cluster.set_ready("a", False)
        await converge(store, ["b-rank-0", "b-rank-1"])
        assert reconciler.informer.name == "informer:Pod:default"
        assert cluster.store.list("CustomResourceDefinition") == []  # no CRDs needed
    finally:
        await reconciler.stop()
