"""The REST surface over a real loopback socket: discovery, OpenAPI, Status bodies, lists, tables, watches, faults."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from apiserver_objects import POOL_CRD, deployment, pod, pool

from epp.clock import ManualClock
from epp_sim.apiserver import RunningApiServer, running_apiserver
from epp_sim.waits import wait_until

TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json"


@pytest.fixture
async def http(apiserver: RunningApiServer) -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(apiserver.url) as session:
        yield session


async def _json(resp: aiohttp.ClientResponse) -> Any:
    return json.loads(await resp.read())


async def _call(
    http: aiohttp.ClientSession,
    method: str,
    path: str,
    body: Any = None,
    *,
    ctype: str = "application/json",
    accept: str = "application/json",
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body)
    async with http.request(method, path, data=data, headers={"Content-Type": ctype, "Accept": accept}) as resp:
        return resp.status, await _json(resp)


async def _watch_lines(http: aiohttp.ClientSession, path: str, n: int, **headers: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    async with asyncio.timeout(5), http.get(path, headers=headers) as resp:
        assert resp.status == 200 and resp.headers["Transfer-Encoding"] == "chunked"
        async for line in resp.content:
            out.append(json.loads(line))
            if len(out) == n:
                break
    return out


async def test_discovery_and_openapi(http: aiohttp.ClientSession, apiserver: RunningApiServer) -> None:
    assert (await _call(http, "GET", "/version"))[1]["gitVersion"] == "v1.35.0"
    assert (await _call(http, "GET", "/api"))[1]["versions"] == ["v1"]
    _, apps = await _call(http, "GET", "/apis/apps/v1")
    by_name = {r["name"]: r for r in apps["resources"]}
    assert by_name["deployments"]["shortNames"] == ["deploy"] and by_name["deployments"]["namespaced"] is True
    assert by_name["deployments/scale"]["kind"] == "Scale" and by_name["deployments/status"]["verbs"] == [
        "get",
        "patch",
        "update",
    ]
    _, core = await _call(http, "GET", "/api/v1")
    assert {"pods", "pods/status", "configmaps", "services", "namespaces"} <= {r["name"] for r in core["resources"]}
    await _call(http, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", POOL_CRD)
    _, groups = await _call(http, "GET", "/apis")
    assert "inference.networking.k8s.io" in {g["name"] for g in groups["groups"]}
    _, root = await _call(http, "GET", "/openapi/v3")
    url = root["paths"]["apis/inference.networking.k8s.io/v1"]["serverRelativeURL"]
    _, doc = await _call(http, "GET", url)
    schema = doc["components"]["schemas"]["io.k8s.networking.inference.v1.InferencePool"]
    assert schema["properties"]["spec"]["required"] == ["selector", "targetPorts", "endpointPickerRef"]
    patch_op = doc["paths"]["/apis/inference.networking.k8s.io/v1/namespaces/{namespace}/inferencepools/{name}"][
        "patch"
    ]
    assert "fieldValidation" in {p["name"] for p in patch_op["parameters"]}
    _, v2 = await _call(http, "GET", "/openapi/v2")
    assert "io.k8s.api.core.v1.Pod" in v2["definitions"]


async def test_status_bodies_for_failures(http: aiohttp.ClientSession) -> None:
    code, body = await _call(http, "GET", "/api/v1/namespaces/default/pods/nope")
    assert code == 404 and body["kind"] == "Status" and body["details"] == {"name": "nope", "kind": "pods"}
    code, body = await _call(http, "POST", "/api/v1/namespaces/default/pods", {"metadata": {"name": "x"}})
    assert code == 422 and body["reason"] == "Invalid" and body["details"]["causes"][0]["field"] == "spec.containers"
    code, body = await _call(http, "GET", "/apis/nothere.io/v1/things")
    assert code == 404 and body["reason"] == "NotFound"
    code, body = await _call(http, "PATCH", "/api/v1/namespaces/default/pods/x", {}, ctype="text/plain")
    assert code == 415
    code, body = await _call(http, "POST", "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "c"}})
    code, body = await _call(
        http,
        "PUT",
        "/api/v1/namespaces/default/configmaps/c",
        {"metadata": {"name": "c", "resourceVersion": "1"}, "data": {"a": "b"}},
    )
    assert code == 409 and body["reason"] == "Conflict"


async def test_pagination_all_namespaces_and_tables(http: aiohttp.ClientSession, apiserver: RunningApiServer) -> None:
    store = apiserver.server.store
    store.create("Namespace", {"metadata": {"name": "other"}})
    for i in range(5):
        store.create("Pod", pod(f"p{i}", labels={"i": str(i)}))
    store.create("Pod", pod("q", namespace="other"))
    names: list[str] = []
    token = ""
    while True:
        _, page = await _call(http, "GET", f"/api/v1/pods?limit=2{'&continue=' + token if token else ''}")
        names += [f"{p['metadata']['namespace']}/{p['metadata']['name']}" for p in page["items"]]
        token = page["metadata"].get("continue", "")
        if not token:
            break
    assert names == ["default/p0", "default/p1", "default/p2", "default/p3", "default/p4", "other/q"]
    store.patch("Pod", "p1", {"status": {"phase": "Running", "podIP": "10.1.1.1", "containerStatuses": [
        {"name": "main", "ready": True, "restartCount": 3, "state": {"running": {}}}]}},
        namespace="default", subresource="status")  # fmt: skip
    _, tbl = await _call(http, "GET", "/api/v1/namespaces/default/pods?labelSelector=i%3D1", accept=TABLE)
    assert tbl["kind"] == "Table" and [c["name"] for c in tbl["columnDefinitions"][:5]] == [
        "Name",
        "Ready",
        "Status",
        "Restarts",
        "Age",
    ]
    assert tbl["rows"][0]["cells"][:5] == ["p1", "1/1", "Running", 3, "0s"]
    assert tbl["rows"][0]["object"]["kind"] == "PartialObjectMetadata"
    _, cm_tbl = await _call(http, "GET", "/api/v1/namespaces/default/configmaps", accept=TABLE)
    assert [c["name"] for c in cm_tbl["columnDefinitions"]] == ["Name", "Data", "Age"]
    await _call(http, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", POOL_CRD)
    await _call(http, "POST", "/apis/inference.networking.k8s.io/v1/namespaces/default/inferencepools", pool("a"))
    _, ip_tbl = await _call(
        http, "GET", "/apis/inference.networking.k8s.io/v1/namespaces/default/inferencepools", accept=TABLE
    )
    assert [c["name"] for c in ip_tbl["columnDefinitions"]] == ["Name", "Port", "Age"]
    assert ip_tbl["rows"][0]["cells"] == ["a", 8000, "0s"]
    code, alpha = await _call(
        http, "GET", "/apis/inference.networking.k8s.io/v1alpha2/namespaces/default/inferencepools/a"
    )
    assert code == 200 and alpha["apiVersion"] == "inference.networking.k8s.io/v1alpha2"


async def test_watch_wire_format_initial_events_bookmarks_and_timeout(
    http: aiohttp.ClientSession, apiserver: RunningApiServer
) -> None:
    store = apiserver.server.store
    store.create("Pod", pod("a"))
    first = await _watch_lines(http, "/api/v1/namespaces/default/pods?watch=true", 1)
    assert first[0]["type"] == "ADDED" and first[0]["object"]["metadata"]["name"] == "a"
    rv = store.resource_version
    store.create("Pod", pod("b"))
    events = await _watch_lines(
        http, f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}&allowWatchBookmarks=true", 2
    )
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "b"
    assert events[1] == {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {
        "resourceVersion": str(store.resource_version)}}}  # fmt: skip
    async with (
        asyncio.timeout(5),
        http.get(f"/api/v1/pods?watch=1&resourceVersion={store.resource_version}&timeoutSeconds=1") as resp,
    ):
        assert await resp.read() == b""  # ends cleanly at timeoutSeconds, nothing happened
    watch_list = await _watch_lines(
        http,
        "/api/v1/namespaces/default/pods?watch=1&sendInitialEvents=true&allowWatchBookmarks=true"
        "&resourceVersionMatch=NotOlderThan",
        3,
    )
    assert [e["type"] for e in watch_list] == ["ADDED", "ADDED", "BOOKMARK"]
    assert watch_list[2]["object"]["metadata"] == {
        "resourceVersion": str(store.resource_version),
        "annotations": {"k8s.io/initial-events-end": "true"},
    }
    table_events = await _watch_lines(http, "/api/v1/namespaces/default/pods?watch=1&labelSelector=", 1, Accept=TABLE)
    assert table_events[0]["object"]["kind"] == "Table"


async def test_watch_410_after_the_history_window(http: aiohttp.ClientSession, apiserver: RunningApiServer) -> None:
    store = apiserver.server.store
    rv = store.resource_version
    store.create("ConfigMap", {"metadata": {"name": "c"}}, namespace="default")
    async with http.put("/_sim/history", json={"limit": 0}) as resp:
        assert resp.status == 200
    [err] = await _watch_lines(http, f"/api/v1/namespaces/default/configmaps?watch=1&resourceVersion={rv}", 1)
    assert err["type"] == "ERROR" and err["object"]["code"] == 410 and err["object"]["reason"] == "Expired"


async def test_injected_errors_latency_and_dropped_watches(
    http: aiohttp.ClientSession, apiserver: RunningApiServer
) -> None:
    server = apiserver.server
    async with http.post(
        "/_sim/errors", json={"status": 503, "verb": "list", "pathPrefix": "/api/v1/pods", "times": 2}
    ) as resp:
        assert resp.status == 200
    codes = [(await _call(http, "GET", "/api/v1/pods"))[0] for _ in range(3)]
    assert codes == [503, 503, 200]
    assert (await _call(http, "GET", "/api/v1/namespaces/default/pods/x"))[0] == 404  # a get, not a list
    server.inject_latency(0.2, verb="get", path_prefix="/api/v1/namespaces/default/configmaps")
    loop = asyncio.get_running_loop()
    start = loop.time()
    await _call(http, "GET", "/api/v1/namespaces/default/configmaps/x")
    assert loop.time() - start >= 0.2
    async with http.delete("/_sim/faults") as resp:
        assert resp.status == 200
    async with asyncio.timeout(5), http.get("/api/v1/pods?watch=1") as resp:
        await wait_until(lambda: server.store.events.open_watches() == 1, timeout=2)
        async with http.post("/_sim/watches/drop") as drop:
            assert (await drop.json()) == {"dropped": 1}
        assert await resp.read() == b""  # the stream ended cleanly (terminating chunk)


async def test_restart_keeps_objects_and_resource_versions(
    http: aiohttp.ClientSession, apiserver: RunningApiServer
) -> None:
    server = apiserver.server
    _, created = await _call(http, "POST", "/apis/apps/v1/namespaces/default/deployments", deployment("d"))
    port = server.port
    async with asyncio.timeout(5), http.get("/apis/apps/v1/deployments?watch=1") as watch:
        await wait_until(lambda: server.store.events.open_watches() == 1, timeout=2)
        async with http.post("/_sim/restart", json={"downSeconds": 0.1}) as resp:
            assert resp.status == 200
        await watch.read()  # the restart ends open watches
    await wait_until(lambda: server.serving, timeout=5)
    assert server.port == port
    async with aiohttp.ClientSession(apiserver.url) as fresh:
        code, got = await _call(fresh, "GET", "/apis/apps/v1/namespaces/default/deployments/d")
        assert code == 200 and got["metadata"]["uid"] == created["metadata"]["uid"]
        rv = got["metadata"]["resourceVersion"]
        _, scaled = await _call(
            fresh,
            "PATCH",
            "/apis/apps/v1/namespaces/default/deployments/d/scale",
            {"spec": {"replicas": 3}},
            ctype="application/merge-patch+json",
        )
        assert int(scaled["metadata"]["resourceVersion"]) == int(rv) + 1
        [event] = await _watch_lines(
            fresh, f"/apis/apps/v1/namespaces/default/deployments?watch=1&resourceVersion={rv}", 1
        )  # a client resumes its watch from before the restart
        assert event["type"] == "MODIFIED" and event["object"]["spec"]["replicas"] == 3


async def test_graceful_pod_deletion_and_delete_collection_over_http() -> None:
    clock = ManualClock()
    async with running_apiserver(clock=clock, pod_grace_seconds=5, bookmark_interval=0.05) as running, \
            aiohttp.ClientSession(running.url) as http:  # fmt: skip
        store = running.server.store
        for name in ("a", "b", "c"):
            store.create("Pod", pod(name, labels={"group": "x" if name != "a" else "y"}))
        rv = store.resource_version
        async with asyncio.timeout(5), http.get(f"/api/v1/namespaces/default/pods?watch=1&resourceVersion={rv}") as w:
            code, marked = await _call(http, "DELETE", "/api/v1/namespaces/default/pods/a")
            assert code == 200 and marked["metadata"]["deletionGracePeriodSeconds"] == 5
            modified = json.loads(await w.content.readline())
            assert modified["type"] == "MODIFIED" and modified["object"]["metadata"]["deletionTimestamp"]
            await wait_until(lambda: clock.sleepers == 1, timeout=2)
            clock.advance(5)
            deleted = json.loads(await w.content.readline())
            assert (deleted["type"], deleted["object"]["metadata"]["name"]) == ("DELETED", "a")
        code, dry = await _call(http, "DELETE", "/api/v1/namespaces/default/pods?labelSelector=group%3Dx&dryRun=All")
        assert code == 200 and [p["metadata"]["name"] for p in dry["items"]] == ["b", "c"]
        assert len(store.list("Pod")) == 2
        code, gone = await _call(
            http, "DELETE", "/api/v1/namespaces/default/pods?labelSelector=group%3Dx&gracePeriodSeconds=0"
        )
        assert code == 200 and len(gone["items"]) == 2 and store.list("Pod") == []


async def test_protobuf_bodies_over_http_and_the_server_survives_bad_ones(
    http: aiohttp.ClientSession, apiserver: RunningApiServer
) -> None:
    proto = "application/vnd.kubernetes.protobuf"
    good = b"k8s\x00" + bytes.fromhex("0a0f0a0276311209") + b"Namespace" + bytes.fromhex("12070a050a036f6273")

    async def post(path: str, body: bytes, accept: str = f"{proto},application/json") -> tuple[int, Any]:
        async with http.post(path, data=body, headers={"Content-Type": proto, "Accept": accept}) as resp:
            return resp.status, await _json(resp)

    for bad, why in [
        (good[:-3], "truncated"),
        (b"k8s\x00" + bytes(range(256)), "not a valid Kubernetes protobuf envelope"),
        (b"garbage", "no k8s\\x00 magic"),
    ]:
        status, body = await post("/api/v1/namespaces", bad)
        assert (status, body["kind"], body["reason"]) == (400, "Status", "BadRequest") and why in body["message"]
    status, body = await post("/api/v1/namespaces/default/configmaps", good)  # a Namespace sent to configmaps
    assert status == 400 and "do not match the resource configmaps" in body["message"]
    status, body = await post("/api/v1/namespaces", good, accept=proto)
    assert status == 406 and "only application/json is served" in body["message"]
    status, body = await post("/api/v1/namespaces", good)  # the server is still serving
    assert status == 201 and body["metadata"]["name"] == "obs" and body["status"] == {"phase": "Active"}
    assert apiserver.server.store.get("Namespace", "obs")["spec"] == {"finalizers": ["kubernetes"]}
