"""Reconcilers over the real Datastore, driven with events directly (no API server)."""

from __future__ import annotations

from kube_objects import model, objective, pod, pool_v1, rewrite, rule

from epp.datastore.store import Datastore
from epp.datastore.types import ObjectiveSpec
from epp.kube.group_merge import Sink
from epp.kube.objective_reconciler import model_reconciler, objective_reconciler
from epp.kube.pod_reconciler import PodReconciler
from epp.kube.pool_reconciler import PoolReconciler
from epp.kube.resources import INFERENCE_MODEL_REWRITE, INFERENCE_OBJECTIVE, V1_GROUP
from epp.kube.rewrite_reconciler import rewrite_reconciler

POOL = {"pool_name": "pool", "pool_group": V1_GROUP}


def names(store: Datastore) -> list[str]:
    return [s.endpoint.name for s in store.endpoints()]


def make(store: Datastore) -> tuple[PodReconciler, PoolReconciler, list[object]]:
    changes: list[object] = []
    pods = PodReconciler(store)
    pool = PoolReconciler(store, pods, pool_name="pool", pool_group=V1_GROUP, on_change=changes.append)
    return pods, pool, changes


def test_pods_before_pool_are_resynced_when_pool_appears() -> None:
    store = Datastore()
    pods, pool, changes = make(store)
    pods.resync([pod("a", ip="10.0.0.1"), pod("b", ip="10.0.0.2", ready=False)])
    pods.apply("ADDED", pod("c", ip="10.0.0.3"))
    assert names(store) == [] and not store.synced
    pool.resync([pool_v1()])
    assert names(store) == ["a-rank-0", "c-rank-0"]
    assert store.synced
    assert changes == [pool.pool]


def test_pod_transitions_after_pool() -> None:
    store = Datastore()
    pods, pool, _ = make(store)
    pool.resync([pool_v1()])
    pods.resync([pod("a", ip="10.0.0.1")])
    assert names(store) == ["a-rank-0"]
    pods.apply("ADDED", pod("b", ip="10.0.0.2"))
    assert names(store) == ["a-rank-0", "b-rank-0"]
    pods.apply("MODIFIED", pod("a", ip="10.0.0.1", ready=False))
    assert names(store) == ["b-rank-0"]
    pods.apply("MODIFIED", pod("a", ip="10.0.0.1"))
    pods.apply("MODIFIED", pod("b", ip="10.0.0.2", deleting=True))
    assert names(store) == ["a-rank-0"]
    pods.apply("MODIFIED", pod("a", ip="10.0.0.1", labels={"app": "other"}))
    assert names(store) == []
    pods.apply("MODIFIED", pod("a", ip="10.0.0.1"))
    pods.apply("DELETED", pod("a", ip="10.0.0.1"))
    assert names(store) == []


def test_relist_drops_pods_that_vanished() -> None:
    store = Datastore()
    pods, pool, _ = make(store)
    pool.resync([pool_v1()])
    pods.resync([pod("a", ip="10.0.0.1"), pod("b", ip="10.0.0.2")])
    pods.resync([pod("b", ip="10.0.0.2"), pod("c", ip="10.0.0.3")])
    assert names(store) == ["b-rank-0", "c-rank-0"]


def test_selector_and_port_changes_resync() -> None:
    store = Datastore()
    pods, pool, _ = make(store)
    pods.resync([pod("a", ip="10.0.0.1", labels={"app": "vllm"}), pod("b", ip="10.0.0.2", labels={"app": "sgl"})])
    pool.resync([pool_v1(match_labels={"app": "vllm"})])
    assert names(store) == ["a-rank-0"]
    pool.apply("MODIFIED", pool_v1(match_labels={"app": "sgl"}))
    assert names(store) == ["b-rank-0"]
    pool.apply("MODIFIED", pool_v1(match_labels={"app": "sgl"}, ports=(8000, 8001)))
    assert names(store) == ["b-rank-0", "b-rank-1"]
    assert [s.endpoint.port for s in store.endpoints()] == [8000, 8001]
    pool.apply("MODIFIED", pool_v1(match_labels={"app": "sgl"}, ports=(9000,)))
    assert [(s.endpoint.name, s.endpoint.port) for s in store.endpoints()] == [("b-rank-0", 9000)]


def test_pool_deleted_clears_and_stops_forwarding_pods() -> None:
    store = Datastore()
    pods, pool, changes = make(store)
    pool.resync([pool_v1()])
    pods.resync([pod("a", ip="10.0.0.1")])
    pool.apply("DELETED", pool_v1())
    assert not store.synced and names(store) == []
    assert changes[-1] is None
    pods.apply("ADDED", pod("b", ip="10.0.0.2"))
    pods.apply("DELETED", pod("a", ip="10.0.0.1"))
    assert names(store) == []
    pool.apply("ADDED", pool_v1())
    assert names(store) == ["b-rank-0"]


def test_pool_being_deleted_or_absent_clears() -> None:
    store = Datastore()
    _, pool, _ = make(store)
    pool.resync([pool_v1()])
    deleting = pool_v1()
    deleting["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    pool.apply("MODIFIED", deleting)
    assert not store.synced
    pool.resync([pool_v1()])
    assert store.synced
    pool.resync([pool_v1("another")])
    assert not store.synced


def test_bad_pool_update_keeps_last_good_pool() -> None:
    store = Datastore()
    pods, pool, _ = make(store)
    pool.resync([pool_v1(ports=(8000,))])
    pods.resync([pod("a", ip="10.0.0.1")])
    pool.apply("MODIFIED", pool_v1(ports=(8000, 8000)))
    assert store.pool is not None and store.pool.target_ports == (8000,)
    assert names(store) == ["a-rank-0"]


def test_unreadable_pod_on_relist_keeps_last_known() -> None:
    store = Datastore()
    pods, pool, _ = make(store)
    pool.resync([pool_v1()])
    pods.resync([pod("a", ip="10.0.0.1")])
    broken = pod("a", ip="10.0.0.1")
    broken["metadata"]["labels"] = "nonsense"
    pods.resync([broken])
    assert names(store) == ["a-rank-0"]


def test_objectives_set_filtered_removed_and_replayed() -> None:
    store = Datastore()
    rec = objective_reconciler(Sink(store.set_objective, store.remove_objective), INFERENCE_OBJECTIVE, **POOL)
    rec.resync([objective("hi", priority=10), objective("other", pool="x", priority=1)])
    assert store.objective("hi") == ObjectiveSpec("hi", "default", 10)
    assert store.objective("other") is None
    rec.apply("MODIFIED", objective("hi", priority=20))
    assert store.objective("hi") == ObjectiveSpec("hi", "default", 20)
    rec.apply("MODIFIED", objective("hi", pool="moved", priority=20))  # poolRef moved away
    assert store.objective("hi") is None
    rec.apply("ADDED", objective("lo", priority=-1))
    store.clear_pool()
    assert store.objective("lo") is None
    rec.replay()
    assert store.objective("lo") == ObjectiveSpec("lo", "default", -1)
    rec.resync([])
    assert store.objective("lo") is None


def test_unreadable_objective_keeps_last_good() -> None:
    store = Datastore()
    rec = objective_reconciler(Sink(store.set_objective, store.remove_objective), INFERENCE_OBJECTIVE, **POOL)
    rec.apply("ADDED", objective("o", priority=3))
    bad = objective("o")
    bad["spec"]["priority"] = "x"
    rec.apply("MODIFIED", bad)
    rec.resync([bad])
    assert store.objective("o") == ObjectiveSpec("o", "default", 3)
    rec.apply("DELETED", bad)
    assert store.objective("o") is None


def test_rewrites_flow_and_are_replaced_on_update() -> None:
    store = Datastore()
    rec = rewrite_reconciler(Sink(store.set_rewrite, store.remove_rewrite), INFERENCE_MODEL_REWRITE, **POOL)
    rec.apply("ADDED", rewrite("old", rules=[rule(["a"], [("a2", None)])], created="2026-01-01T00:00:00Z"))
    rec.apply("ADDED", rewrite("new", rules=[rule([], [("b", 1)])], created="2026-02-01T00:00:00Z"))
    assert [r.name for r in store.rewrites()] == ["old", "new"]
    rec.apply("MODIFIED", rewrite("old", rules=[rule(["z"], [("z2", 3)])], created="2026-01-01T00:00:00Z"))
    assert store.rewrites()[0].rules[0].matches == ("z",)
    rec.apply("DELETED", rewrite("old", rules=[]))
    assert [r.name for r in store.rewrites()] == ["new"]


def test_models_oldest_wins_and_backfills() -> None:
    store = Datastore()
    rec = model_reconciler(store, pool_name="pool")
    rec.resync(
        [
            model("young", model_name="llama", criticality="Sheddable", created="2026-03-01T00:00:00Z"),
            model("old", model_name="llama", criticality="Critical", created="2026-01-01T00:00:00Z"),
        ]
    )
    found = store.model("llama")
    assert found is not None and found.name == "old"
    rec.apply("DELETED", model("old", model_name="llama"))
    found = store.model("llama")
    assert found is not None and found.name == "young"
