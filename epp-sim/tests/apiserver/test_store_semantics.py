"""The store's write semantics through the in-process API: what controllers and the REST layer rely on."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from apiserver_objects import POOL_CRD, deployment, pod, pool

from epp.clock import ManualClock
from epp_sim.apiserver import ApiError, Store
from epp_sim.apiserver.patch import APPLY, JSON_PATCH, STRATEGIC
from epp_sim.waits import wait_until


@pytest.fixture
async def store() -> Any:
    s = Store()
    yield s
    await s.aclose()


def _err(fn: Any, *args: Any, **kwargs: Any) -> ApiError:
    with pytest.raises(ApiError) as info:
        fn(*args, **kwargs)
    return info.value


async def test_create_sets_identity_and_one_rising_resource_version(store: Store) -> None:
    start = store.resource_version
    p = store.create("Pod", pod("a"))
    cm = store.create("configmaps", {"metadata": {"name": "c"}, "data": {"k": "v"}}, namespace="default")
    d = store.create("deployments.apps", deployment("d"), namespace="default")
    rvs = [int(o["metadata"]["resourceVersion"]) for o in (p, cm, d)]
    assert rvs == [start + 1, start + 2, start + 3]
    assert len({p["metadata"]["uid"], cm["metadata"]["uid"], d["metadata"]["uid"]}) == 3
    assert p["metadata"]["creationTimestamp"].endswith("Z")
    assert p["metadata"]["generation"] == 1 and d["metadata"]["generation"] == 1
    assert "generation" not in cm["metadata"]
    assert p["status"] == {"phase": "Pending", "qosClass": "BestEffort"}  # status is reset on create
    assert d["spec"]["strategy"]["type"] == "RollingUpdate" and d["spec"]["revisionHistoryLimit"] == 10
    assert store.get("po", "a", namespace="default") == p


async def test_errors_are_real_status_failures(store: Store) -> None:
    store.create("Pod", pod("a"))
    dup = _err(store.create, "Pod", pod("a"))
    assert (dup.code, dup.reason, dup.message) == (409, "AlreadyExists", 'pods "a" already exists')
    missing = _err(store.get, "Deployment", "nope", namespace="default")
    assert missing.status() == {
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": 'deployments.apps "nope" not found', "reason": "NotFound", "code": 404,
        "details": {"name": "nope", "kind": "deployments", "group": "apps"},
    }  # fmt: skip
    bad = _err(store.create, "Pod", {"metadata": {"name": "b"}, "spec": {"containers": "nope"}})
    assert bad.code == 422 and bad.reason == "Invalid"
    assert bad.details is not None and bad.details["causes"][0]["field"] == "spec.containers"
    no_ns = _err(store.create, "Pod", pod("x", namespace="ghost"))
    assert (no_ns.code, no_ns.message) == (404, 'namespaces "ghost" not found')
    selector = _err(
        store.create,
        "Deployment",
        {**deployment("d"), "spec": {**deployment("d")["spec"], "selector": {"matchLabels": {"a": "b"}}}},
    )
    assert selector.code == 422 and "does not match template" in selector.message


async def test_stale_update_conflicts_and_generation_tracks_spec_only(store: Store) -> None:
    d = store.create("Deployment", deployment("d"), namespace="default")
    d["spec"]["replicas"] = 3
    updated = store.update("Deployment", d)
    assert updated["metadata"]["generation"] == 2
    d["spec"]["replicas"] = 4  # still carries the old resourceVersion
    stale = _err(store.update, "Deployment", d)
    assert stale.code == 409 and stale.reason == "Conflict" and "has been modified" in stale.message
    labelled = store.patch("Deployment", "d", {"metadata": {"labels": {"x": "y"}}}, namespace="default")
    assert labelled["metadata"]["generation"] == 2  # metadata changes do not bump generation
    status = store.patch("Deployment", "d", {"status": {"replicas": 3}}, namespace="default", subresource="status")
    assert status["metadata"]["generation"] == 2 and status["status"]["replicas"] == 3
    same = store.update("Deployment", status)
    assert same["metadata"]["resourceVersion"] == status["metadata"]["resourceVersion"]  # no-op: no new rv


async def test_status_subresource_isolates_status_from_spec(store: Store) -> None:
    p = store.create("Pod", pod("a"))
    p["status"] = {"phase": "Running"}
    p["metadata"]["labels"] = {"via": "main"}
    main = store.update("Pod", p)
    assert main["status"]["phase"] == "Pending" and main["metadata"]["labels"] == {"via": "main"}
    main["status"] = {"phase": "Running", "podIP": "10.0.0.1"}
    main["metadata"]["labels"] = {"via": "status"}
    st = store.update("Pod", main, subresource="status")
    assert st["status"]["podIP"] == "10.0.0.1" and st["metadata"]["labels"] == {"via": "main"}
    image = store.patch(
        "Pod",
        "a",
        {"spec": {"containers": [{"name": "main", "image": "other"}]}},
        namespace="default",
        patch_type=STRATEGIC,
    )
    assert image["spec"]["containers"][0]["image"] == "other"
    forbidden = _err(store.patch, "Pod", "a", {"spec": {"nodeName": "n1"}}, namespace="default")
    assert forbidden.code == 422 and "pod updates may not change" in forbidden.message


async def test_crd_serves_kind_with_defaults_pruning_and_versions(store: Store) -> None:
    store.create("CustomResourceDefinition", POOL_CRD)
    crd = store.get("crd", POOL_CRD["metadata"]["name"])
    assert {c["type"]: c["status"] for c in crd["status"]["conditions"]} == {
        "NamesAccepted": "True",
        "Established": "True",
    }
    p = store.create("infpool", {**pool("p1", bogus=1), "status": {"x": 1}}, namespace="default")
    assert "bogus" not in p["spec"] and "status" not in p
    assert p["spec"]["endpointPickerRef"] == {
        "name": "epp",
        "port": {"number": 9002},
        "kind": "Service",
        "failureMode": "FailClose",
    }
    kept = store.patch("InferencePool", "p1", {"spec": {"extra": {"any": {"thing": 1}}}}, namespace="default")
    assert kept["spec"]["extra"] == {"any": {"thing": 1}} and kept["metadata"]["generation"] == 2
    invalid = _err(store.create, "InferencePool", pool("p2", port=70000), namespace="default")
    assert invalid.code == 422 and invalid.details is not None
    assert invalid.details["causes"][0]["field"] == "spec.targetPorts[0].number"
    assert invalid.details["group"] == "inference.networking.k8s.io"
    old = store.create(
        "InferencePool", {**pool("p3"), "apiVersion": "inference.networking.k8s.io/v1alpha2"}, namespace="default"
    )
    assert old["apiVersion"] == "inference.networking.k8s.io/v1"  # stored at the storage version
    strict = _err(store.create, "InferencePool", pool("p4", bogus=1), namespace="default", strict=True)
    assert strict.code == 400 and 'unknown field "spec.bogus"' in strict.message
    smp = _err(store.patch, "InferencePool", "p1", {"spec": {}}, namespace="default", patch_type=STRATEGIC)
    assert smp.code == 415

    store.delete("crd", POOL_CRD["metadata"]["name"])
    assert _err(store.list, "InferencePool").code == 404
    store.create("CustomResourceDefinition", POOL_CRD)
    assert store.list("InferencePool") == []  # deleting the CRD deleted its objects


async def test_finalizers_hold_deletion_until_removed(store: Store) -> None:
    store.create("ConfigMap", {"metadata": {"name": "c", "finalizers": ["example.com/hold"]}}, namespace="default")
    async with store.subscribe("ConfigMap", namespace="default", resource_version=store.resource_version) as watch:
        marked = store.delete("ConfigMap", "c", namespace="default")
        assert marked["metadata"]["deletionTimestamp"] and store.get("cm", "c", namespace="default")
        store.patch("ConfigMap", "c", {"metadata": {"finalizers": None}}, namespace="default")
        assert _err(store.get, "cm", "c", namespace="default").code == 404
        seen = [(t, e.object["metadata"].get("finalizers")) async for t, e in _take(watch, 2)]
    assert seen == [("MODIFIED", ["example.com/hold"]), ("DELETED", None)]


async def test_pod_graceful_deletion_modified_then_deleted_after_grace() -> None:
    clock = ManualClock()
    store = Store(clock=clock, pod_grace_seconds=30)
    try:
        store.create("Pod", pod("a"))
        watch = store.subscribe("Pod", resource_version=store.resource_version)
        gone = store.delete("Pod", "a", namespace="default")
        assert gone["metadata"]["deletionGracePeriodSeconds"] == 30
        await wait_until(lambda: clock.sleepers == 1, timeout=2)
        clock.advance(29)
        await asyncio.sleep(0)
        assert store.get("Pod", "a", namespace="default")["metadata"]["deletionTimestamp"]
        clock.advance(1)
        events = [(t, e.object["metadata"].get("deletionTimestamp") is not None) async for t, e in _take(watch, 2)]
        assert events == [("MODIFIED", True), ("DELETED", True)]
        store.create("Pod", pod("b"))
        store.delete("Pod", "b", namespace="default", grace_period_seconds=0)  # explicit 0: immediate
        assert _err(store.get, "Pod", "b", namespace="default").code == 404
        watch.close()
    finally:
        await store.aclose()


async def test_owner_references_and_namespaces_cascade(store: Store) -> None:
    store.create("Namespace", {"metadata": {"name": "team"}})
    d = store.create("Deployment", deployment("d"), namespace="team")
    owner = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "d",
        "uid": d["metadata"]["uid"],
        "controller": True,
    }
    store.create(
        "Pod",
        {**pod("owned", namespace="team"), "metadata": {"name": "owned", "ownerReferences": [owner]}},
        namespace="team",
    )
    store.create("Pod", pod("free", namespace="team"))
    store.delete("Deployment", "d", namespace="team")
    assert [p["metadata"]["name"] for p in store.list("Pod", namespace="team")] == ["free"]
    store.delete("Namespace", "team")
    assert store.list("Pod", namespace="team") == []


async def test_selectors_and_label_transitions_in_watches(store: Store) -> None:
    store.create("Pod", pod("a", labels={"app": "x"}))
    store.create("Pod", pod("b", labels={"app": "y"}))
    store.patch("Pod", "b", {"status": {"phase": "Running"}}, namespace="default", subresource="status")
    assert [p["metadata"]["name"] for p in store.list("Pod", label_selector="app in (x,y),app!=y")] == ["a"]
    assert [p["metadata"]["name"] for p in store.list("Pod", field_selector="status.phase=Running")] == ["b"]
    assert [
        p["metadata"]["name"] for p in store.list("Pod", field_selector="metadata.name!=b,metadata.namespace=default")
    ] == ["a"]
    assert _err(store.list, "Pod", label_selector="app in (x").code == 400
    async with store.subscribe("Pod", label_selector="app=x") as watch:
        store.patch("Pod", "b", {"metadata": {"labels": {"app": "x"}}}, namespace="default")
        store.patch("Pod", "a", {"metadata": {"labels": {"app": "z"}}}, namespace="default")
        seen = [(t, e.object["metadata"]["name"]) async for t, e in _take(watch, 3)]
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a")]


async def test_watch_history_window_gives_410() -> None:
    store = Store(history_limit=3)
    try:
        rv = store.resource_version
        for i in range(3):
            store.create("ConfigMap", {"metadata": {"name": f"c{i}"}}, namespace="default")
        async with store.subscribe("ConfigMap", resource_version=rv) as watch:
            assert [e.object["metadata"]["name"] async for _, e in _take(watch, 3)] == ["c0", "c1", "c2"]
        store.create("ConfigMap", {"metadata": {"name": "c3"}}, namespace="default")
        gone = _err(store.subscribe, "ConfigMap", resource_version=rv)
        assert gone.code == 410 and gone.message.startswith(f"too old resource version: {rv}")
        store.compact()
        assert _err(store.subscribe, "ConfigMap", resource_version=store.resource_version - 1).code == 410
        store.subscribe("ConfigMap", resource_version=store.resource_version).close()
    finally:
        await store.aclose()


async def test_server_side_apply_creates_updates_and_drops_unapplied_fields(store: Store) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "c", "labels": {"a": "1"}},
        "data": {"x": "1", "y": "2"},
    }
    created = store.patch("ConfigMap", "c", body, namespace="default", patch_type=APPLY, field_manager="me")
    assert created["data"] == {"x": "1", "y": "2"}
    assert created["metadata"]["managedFields"][0]["manager"] == "me"
    store.patch("ConfigMap", "c", {"data": {"z": "3"}}, namespace="default")  # someone else's field
    again = store.patch(
        "ConfigMap", "c", {**body, "data": {"x": "1"}}, namespace="default", patch_type=APPLY, field_manager="me"
    )
    assert again["data"] == {"x": "1", "z": "3"}
    same = store.patch(
        "ConfigMap", "c", {**body, "data": {"x": "1"}}, namespace="default", patch_type=APPLY, field_manager="me"
    )
    assert same["metadata"]["resourceVersion"] == again["metadata"]["resourceVersion"]
    assert _err(store.patch, "ConfigMap", "c", body, namespace="default", patch_type=APPLY).code == 400


async def test_scale_subresource_and_json_patch(store: Store) -> None:
    store.create("Deployment", deployment("d", replicas=2), namespace="default")
    scale = store.patch("Deployment", "d", {"spec": {"replicas": 5}}, namespace="default", subresource="scale")
    assert scale["kind"] == "Scale" and scale["spec"]["replicas"] == 5 and scale["status"]["selector"] == "app=vllm"
    d = store.get("Deployment", "d", namespace="default")
    assert d["spec"]["replicas"] == 5 and d["metadata"]["generation"] == 2
    patched = store.patch(
        "Deployment",
        "d",
        [
            {"op": "replace", "path": "/spec/replicas", "value": 1},
            {"op": "add", "path": "/metadata/labels/k", "value": "v"},
        ],
        namespace="default",
        patch_type=JSON_PATCH,
    )
    assert patched["spec"]["replicas"] == 1 and patched["metadata"]["labels"]["k"] == "v"
    negative = _err(store.update_scale, "Deployment", "d", {"spec": {"replicas": -1}}, namespace="default")
    assert negative.code == 422


async def _take(watch: Any, n: int) -> Any:
    for _ in range(n):
        async with asyncio.timeout(5):
            yield await watch.__anext__()
