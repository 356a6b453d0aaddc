"""Datastore invariants: eligibility, ranks, active ports, resyncs, replacement, listeners, CRD stores."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest

from epp.datastore.endpoints import active_ports, pod_endpoints
from epp.datastore.store import Datastore
from epp.datastore.types import (
    ACTIVE_PORTS_ANNOTATION,
    DatastoreReader,
    DatastoreWriter,
    ModelSpec,
    ObjectiveSpec,
    PodInfo,
    PoolSpec,
    RewriteRule,
    RewriteSpec,
    TargetModel,
)
from epp.framework.endpoint import EndpointState, MetricsSnapshot
from epp.labels import Selector, parse_selector

NS = "llm"
APP = {"app": "vllm"}


def pool(selector: str = "app=vllm", ports: tuple[int, ...] = (8000,), name: str = "pool") -> PoolSpec:
    return PoolSpec(name=name, namespace=NS, selector=parse_selector(selector), target_ports=ports)


def pod(name: str = "p1", ip: str = "10.0.0.1", **kw: object) -> PodInfo:
    fields: dict[str, object] = {"namespace": NS, "labels": APP, "ready": True}
    fields.update(kw)
    return PodInfo(name=name, ip=ip, **fields)  # type: ignore[arg-type]


def names(store: Datastore) -> list[str]:
    return [s.endpoint.name for s in store.endpoints()]


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[list[str], list[str]]] = []

    def __call__(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        self.events.append(([s.endpoint.key for s in added], [s.endpoint.key for s in removed]))


def test_implements_both_protocols() -> None:
    store: DatastoreWriter = Datastore()
    reader: DatastoreReader = Datastore()
    assert store is not None and reader.synced is False


@pytest.mark.parametrize(
    ("case", "info", "kept"),
    [
        ("ready", pod(), True),
        ("not ready", pod(ready=False), False),
        ("deleting but ready", pod(deleting=True), False),
        ("selector mismatch", pod(labels={"app": "sglang"}), False),
        ("no labels", pod(labels={}), False),
        ("wrong namespace", pod(namespace="other"), False),
        ("no ip yet", pod(ip=""), False),
        ("extra labels", pod(labels={"app": "vllm", "tier": "gpu"}), True),
    ],
)
def test_eligibility(case: str, info: PodInfo, kept: bool) -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(info)
    assert (names(store) == ["p1-rank-0"]) is kept, case


def test_pod_becoming_unready_or_deleting_is_removed_at_once() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod())
    store.upsert_pod(pod(deleting=True))
    assert names(store) == []
    store.upsert_pod(pod())
    store.upsert_pod(pod(ready=False))
    assert names(store) == []


def test_one_endpoint_per_target_port_with_rank_names_and_metrics_ports() -> None:
    store = Datastore()
    store.set_pool(pool(ports=(8000, 8001, 8002)))
    store.upsert_pod(pod(labels={"app": "vllm", "inference.networking.k8s.io/engine-type": "sglang"}))
    eps = [s.endpoint for s in store.endpoints()]
    assert [(e.name, e.pod_name, e.port, e.metrics_port, e.rank, e.hostport) for e in eps] == [
        ("p1-rank-0", "p1", 8000, 8000, 0, "10.0.0.1:8000"),
        ("p1-rank-1", "p1", 8001, 8001, 1, "10.0.0.1:8001"),
        ("p1-rank-2", "p1", 8002, 8002, 2, "10.0.0.1:8002"),
    ]
    assert all(e.key == f"{NS}/{e.name}" and e.engine == "sglang" for e in eps)


def test_ipv6_address_kept_raw_and_bracketed_in_hostport() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod(ip="fd00::12"))
    (ep,) = [s.endpoint for s in store.endpoints()]
    assert ep.address == "fd00::12"
    assert ep.hostport == "[fd00::12]:8000"


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (None, ["p1-rank-0", "p1-rank-1", "p1-rank-2"]),
        ("8001", ["p1-rank-1"]),
        ("8002, 8000", ["p1-rank-0", "p1-rank-2"]),
        ("8001,9999", ["p1-rank-1"]),  # unknown ports ignored
        ("abc,8000", ["p1-rank-0"]),  # malformed entries ignored
        ("", []),  # present but empty: no port is active (upstream)
        ("9999", []),
    ],
)
def test_active_ports_annotation(annotation: str | None, expected: list[str]) -> None:
    store = Datastore()
    store.set_pool(pool(ports=(8000, 8001, 8002)))
    annotations = {} if annotation is None else {ACTIVE_PORTS_ANNOTATION: annotation}
    store.upsert_pod(pod(annotations=annotations))
    assert names(store) == expected


def test_active_ports_change_removes_inactive_rank() -> None:
    store = Datastore()
    store.set_pool(pool(ports=(8000, 8001)))
    rec = Recorder()
    store.subscribe(rec)
    store.upsert_pod(pod())
    store.upsert_pod(pod(annotations={ACTIVE_PORTS_ANNOTATION: "8001"}))
    assert names(store) == ["p1-rank-1"]
    assert rec.events[-1] == ([], [f"{NS}/p1-rank-0"])


def test_active_ports_helper() -> None:
    assert active_ports({}, (1, 2)) == frozenset({1, 2})
    assert active_ports({ACTIVE_PORTS_ANNOTATION: " 2 ,x,3"}, (1, 2)) == frozenset({2})


def test_metrics_port_override_applies_only_to_single_port_pools() -> None:
    assert [e.metrics_port for e in pod_endpoints(pod(), pool(), metrics_port=9100)] == [9100]
    assert [e.metrics_port for e in pod_endpoints(pod(), pool(ports=(8000, 8001)), metrics_port=9100)] == [8000, 8001]


def test_pods_seen_before_the_pool_are_added_when_it_appears() -> None:
    store = Datastore()
    store.upsert_pod(pod("a", "10.0.0.1"))
    store.upsert_pod(pod("b", "10.0.0.2", ready=False))
    store.upsert_pod(pod("c", "10.0.0.3"))
    store.remove_pod(NS, "c")
    assert store.endpoints() == () and not store.synced
    assert store.set_pool(pool()) is True
    assert store.synced
    assert names(store) == ["a-rank-0"]


def test_set_pool_reports_changes_and_resyncs_on_selector_change() -> None:
    store = Datastore()
    store.set_pool(pool("app=vllm"))
    store.upsert_pod(pod("a", labels={"app": "vllm", "v": "1"}))
    store.upsert_pod(pod("b", "10.0.0.2", labels={"app": "vllm", "v": "2"}))
    store.upsert_pod(pod("c", "10.0.0.3", labels={"app": "other", "v": "2"}))
    assert names(store) == ["a-rank-0", "b-rank-0"]
    snapshot = store.endpoints()
    # Same selector (terms in another order) and ports: no change, no resync.
    assert store.set_pool(pool("app=vllm")) is False
    assert store.endpoints() is snapshot
    assert store.set_pool(pool("v=2")) is True
    assert names(store) == ["b-rank-0", "c-rank-0"]
    assert store.set_pool(pool("v=2,app=other")) is True
    assert store.set_pool(pool("app=other,v=2")) is False
    assert names(store) == ["c-rank-0"]


def test_non_identity_pool_fields_update_without_resync() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod())
    before = store.endpoints()
    assert store.set_pool(replace(pool(), app_protocol="kubernetes.io/h2c")) is False
    assert store.pool is not None and store.pool.app_protocol == "kubernetes.io/h2c"
    assert store.endpoints() is before


def test_port_shrink_removes_orphan_ranks_and_growth_adds_them() -> None:
    store = Datastore()
    store.set_pool(pool(ports=(8000, 8001, 8002)))
    store.upsert_pod(pod("a"))
    store.upsert_pod(pod("b", "10.0.0.2"))
    assert len(store.endpoints()) == 6
    rec = Recorder()
    store.subscribe(rec)
    assert store.set_pool(pool(ports=(8000,))) is True
    assert names(store) == ["a-rank-0", "b-rank-0"]
    assert sorted(rec.events[-1][1]) == [f"{NS}/{p}-rank-{i}" for p in "ab" for i in (1, 2)]
    assert store.set_pool(pool(ports=(8000, 9000))) is True
    assert [(s.endpoint.name, s.endpoint.port) for s in store.endpoints()] == [
        ("a-rank-0", 8000),
        ("a-rank-1", 9000),
        ("b-rank-0", 8000),
        ("b-rank-1", 9000),
    ]


def test_port_reorder_replaces_endpoints_whose_port_moved() -> None:
    store = Datastore()
    store.set_pool(pool(ports=(8000, 8001)))
    store.upsert_pod(pod())
    for s in store.endpoints():
        s.metrics = MetricsSnapshot(waiting_queue=s.endpoint.port, updated_at=1.0)
    store.set_pool(pool(ports=(8001, 8000)))
    got = {s.endpoint.name: (s.endpoint.port, s.metrics.waiting_queue) for s in store.endpoints()}
    assert got == {"p1-rank-0": (8001, 0), "p1-rank-1": (8000, 0)}  # new port under the name: fresh metrics


def test_set_pool_with_pod_list_resyncs_against_it() -> None:
    store = Datastore()
    store.upsert_pod(pod("stale"))
    store.set_pool(pool(), pods=[pod("a"), pod("b", "10.0.0.2")])
    assert names(store) == ["a-rank-0", "b-rank-0"]
    # Unchanged pool, but a full list still resyncs (relist).
    assert store.set_pool(pool(), pods=[pod("b", "10.0.0.2")]) is False
    assert names(store) == ["b-rank-0"]


def test_resync_pods_replaces_the_pod_set() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod("a"))
    store.upsert_pod(pod("b", "10.0.0.2"))
    store.resync_pods([pod("b", "10.0.0.2"), pod("c", "10.0.0.3")])
    assert names(store) == ["b-rank-0", "c-rank-0"]


def test_ip_change_replaces_state_and_drops_metrics() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod())
    (old,) = store.endpoints()
    old.metrics = MetricsSnapshot(waiting_queue=7, updated_at=5.0)
    rec = Recorder()
    store.subscribe(rec)
    store.upsert_pod(pod(ip="10.0.0.9"))
    (new,) = store.endpoints()
    assert new is not old
    assert new.endpoint.address == "10.0.0.9"
    assert new.metrics == MetricsSnapshot()
    assert rec.events == [([f"{NS}/p1-rank-0"], [f"{NS}/p1-rank-0"])]


def test_label_change_replaces_state_and_keeps_metrics() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod())
    (old,) = store.endpoints()
    old.metrics = MetricsSnapshot(waiting_queue=7, updated_at=5.0)
    store.upsert_pod(pod(labels={"app": "vllm", "zone": "b"}))
    (new,) = store.endpoints()
    assert new is not old
    assert new.endpoint.labels == {"app": "vllm", "zone": "b"}
    assert new.metrics is old.metrics


def test_unchanged_upsert_keeps_state_cache_and_emits_nothing() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod())
    before = store.endpoints()
    rec = Recorder()
    store.subscribe(rec)
    store.upsert_pod(pod(annotations={"unrelated": "x"}))
    assert store.endpoints() is before
    assert rec.events == []


def test_endpoints_is_a_cached_tuple_rebuilt_only_on_change() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod("b", "10.0.0.2"))
    store.upsert_pod(pod("a"))
    first = store.endpoints()
    assert isinstance(first, tuple)
    assert store.endpoints() is first
    assert names(store) == ["a-rank-0", "b-rank-0"]  # sorted by key
    store.remove_pod(NS, "a")
    assert store.endpoints() is not first
    assert names(store) == ["b-rank-0"]


def test_listeners_get_added_and_removed_and_can_unsubscribe() -> None:
    store = Datastore()
    rec = Recorder()
    unsubscribe = store.subscribe(rec)
    store.set_pool(pool(ports=(8000, 8001)))
    store.upsert_pod(pod())
    store.remove_pod(NS, "p1")
    store.remove_pod(NS, "p1")  # idempotent, no event
    assert rec.events == [
        ([f"{NS}/p1-rank-0", f"{NS}/p1-rank-1"], []),
        ([], [f"{NS}/p1-rank-0", f"{NS}/p1-rank-1"]),
    ]
    unsubscribe()
    unsubscribe()
    store.upsert_pod(pod())
    assert len(rec.events) == 2


def test_failing_listener_does_not_break_the_store_or_other_listeners() -> None:
    store = Datastore()

    def broken(added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        raise RuntimeError("boom")

    rec = Recorder()
    store.subscribe(broken)
    store.subscribe(rec)
    store.set_pool(pool())
    store.upsert_pod(pod())
    assert names(store) == ["p1-rank-0"]
    assert rec.events == [([f"{NS}/p1-rank-0"], [])]


def test_clear_pool_drops_everything_but_remembers_pods() -> None:
    store = Datastore()
    store.set_pool(pool())
    store.upsert_pod(pod())
    store.set_model(ModelSpec("m", NS, "llama"))
    store.set_objective(ObjectiveSpec("o", NS, priority=1))
    store.set_rewrite(RewriteSpec("r", NS, rules=()))
    rec = Recorder()
    store.subscribe(rec)
    store.clear_pool()
    assert store.pool is None and not store.synced
    assert store.endpoints() == ()
    assert store.model("llama") is None and store.objective("o") is None and store.rewrites() == ()
    assert rec.events == [([], [f"{NS}/p1-rank-0"])]
    store.set_pool(pool())
    assert names(store) == ["p1-rank-0"]


def model(name: str, model_name: str, created: float, crit: str | None = None) -> ModelSpec:
    return ModelSpec(name=name, namespace=NS, model_name=model_name, criticality=crit, created=created)


def test_models_oldest_wins_same_object_overwrites_and_delete_backfills() -> None:
    store = Datastore()
    store.set_model(model("new", "llama", created=200))
    assert store.model("llama") == model("new", "llama", created=200)
    store.set_model(model("old", "llama", created=100))
    assert store.model("llama") == model("old", "llama", created=100)
    store.set_model(model("newer", "llama", created=300))
    assert store.model("llama").name == "old"  # type: ignore[union-attr]
    # The same object always overwrites its own entry.
    store.set_model(model("old", "llama", created=100, crit="Critical"))
    assert store.model("llama").criticality == "Critical"  # type: ignore[union-attr]
    # Deleting the winner backfills from the oldest remaining object, with no API call.
    store.remove_model(NS, "old")
    assert store.model("llama").name == "new"  # type: ignore[union-attr]
    store.remove_model(NS, "new")
    store.remove_model(NS, "missing")
    assert store.model("llama").name == "newer"  # type: ignore[union-attr]
    store.remove_model(NS, "newer")
    assert store.model("llama") is None


def test_model_changing_model_name_moves_and_backfills_the_old_name() -> None:
    store = Datastore()
    store.set_model(model("a", "llama", created=1))
    store.set_model(model("b", "llama", created=2))
    store.set_model(model("a", "mistral", created=1))
    assert store.model("llama").name == "b"  # type: ignore[union-attr]
    assert store.model("mistral").name == "a"  # type: ignore[union-attr]


def test_objectives_are_keyed_by_object_name() -> None:
    store = Datastore()
    store.set_objective(ObjectiveSpec("critical", NS, priority=10))
    store.set_objective(ObjectiveSpec("batch", NS, priority=-1))
    store.set_objective(ObjectiveSpec("critical", NS, priority=20))
    assert store.objective("critical") == ObjectiveSpec("critical", NS, priority=20)
    store.remove_objective("other-ns", "critical")  # not ours: kept
    assert store.objective("critical") is not None
    store.remove_objective(NS, "critical")
    assert store.objective("critical") is None
    assert store.objective("batch") == ObjectiveSpec("batch", NS, priority=-1)


def test_rewrites_are_returned_oldest_first_and_updates_replace() -> None:
    store = Datastore()
    rule = RewriteRule(matches=("a",), targets=(TargetModel("b", 1),))
    store.set_rewrite(RewriteSpec("r3", NS, rules=(rule,), created=30))
    store.set_rewrite(RewriteSpec("r1", NS, rules=(rule,), created=10))
    store.set_rewrite(RewriteSpec("r2", NS, rules=(rule,), created=20))
    assert [r.name for r in store.rewrites()] == ["r1", "r2", "r3"]
    store.set_rewrite(RewriteSpec("r1", NS, rules=(), created=10))
    assert [(r.name, r.rules) for r in store.rewrites()][0] == ("r1", ())
    store.remove_rewrite(NS, "r2")
    assert [r.name for r in store.rewrites()] == ["r1", "r3"]


def test_selector_from_match_labels_equals_parsed_string() -> None:
    store = Datastore()
    store.set_pool(PoolSpec("pool", NS, Selector.from_match_labels({"b": "2", "a": "1"}), (8000,)))
    assert store.set_pool(PoolSpec("pool", NS, parse_selector("b=2,a=1"), (8000,))) is False
