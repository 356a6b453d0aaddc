"""The kubernetes python client and kr8s against the fake API server: CRUD, lists, watches, 410, paging."""

from __future__ import annotations

import asyncio
from typing import Any

import kr8s.asyncio
import pytest
from apiserver_objects import POOL_CRD, pod, pool
from kr8s.asyncio.objects import Pod, new_class
from kubernetes import client, config, watch
from kubernetes.client.rest import ApiException

from epp_sim.apiserver import RunningApiServer
from epp_sim.waits import wait_until

InferencePool = new_class(kind="InferencePool", version="inference.networking.k8s.io/v1", namespaced=True)


async def _core(apiserver: RunningApiServer) -> client.CoreV1Api:
    """The client reads its kubeconfig synchronously (about a second): off the event loop."""
    api_client = await asyncio.to_thread(config.new_client_from_config, config_file=str(apiserver.kubeconfig))
    return client.CoreV1Api(api_client)


def _watch_events(core: client.CoreV1Api, rv: str, n: int) -> list[tuple[str, Any]]:
    """Blocking: the first ``n`` events of a pod watch from ``rv`` with bookmarks (runs in a thread)."""
    out: list[tuple[str, Any]] = []
    w = watch.Watch()
    for ev in w.stream(
        core.list_namespaced_pod, "default", resource_version=rv, allow_watch_bookmarks=True, timeout_seconds=5
    ):
        out.append((ev["type"], ev["raw_object"]))
        if len(out) == n:
            w.stop()
    return out


async def test_kubernetes_client_create_list_watch_bookmarks_and_410(apiserver: RunningApiServer) -> None:
    core = await _core(apiserver)
    await asyncio.to_thread(core.create_namespaced_pod, "default", pod("a", labels={"app": "x"}))
    listed = await asyncio.to_thread(core.list_namespaced_pod, "default", label_selector="app=x")
    assert [p.metadata.name for p in listed.items] == ["a"] and listed.items[0].status.phase == "Pending"
    rv = listed.metadata.resource_version
    await asyncio.to_thread(core.create_namespaced_pod, "default", pod("b"))
    events = await asyncio.to_thread(_watch_events, core, rv, 2)
    assert events[0][0] == "ADDED" and events[0][1]["metadata"]["name"] == "b"
    assert events[1][0] == "BOOKMARK" and int(events[1][1]["metadata"]["resourceVersion"]) > int(rv)
    conflict = await asyncio.to_thread(_stale_replace, core)
    assert conflict.status == 409
    apiserver.server.store.compact()
    with pytest.raises(ApiException) as gone:
        await asyncio.to_thread(_watch_events, core, rv, 1)
    assert gone.value.status == 410


def _stale_replace(core: client.CoreV1Api) -> ApiException:
    p = core.read_namespaced_pod("a", "default")
    core.patch_namespaced_pod("a", "default", {"metadata": {"labels": {"v": "2"}}})
    try:
        core.replace_namespaced_pod("a", "default", p)
    except ApiException as e:
        return e
    raise AssertionError("a stale replace must conflict")


async def test_kr8s_list_watch_pagination_and_custom_objects(apiserver: RunningApiServer) -> None:
    store = apiserver.server.store
    for i in range(105):  # kr8s pages by 100
        store.create("ConfigMap", {"metadata": {"name": f"cm-{i:03d}"}}, namespace="default")
    store.create("Pod", pod("existing", labels={"app": "x"}))
    api = await kr8s.asyncio.api(kubeconfig=str(apiserver.kubeconfig))
    assert (await api.version())["minor"] == "35"
    names = [cm.name async for cm in api.get("configmaps", namespace="default")]
    assert names == [f"cm-{i:03d}" for i in range(105)]
    pages = [r for r in apiserver.server.recent_requests if r.startswith("GET /api/v1/namespaces/default/configmaps")]
    assert len(pages) == 2 and "limit=100" in pages[0] and "continue=" in pages[1]

    seen: list[tuple[str, str]] = []

    async def consume() -> None:
        async for event_type, obj in api.watch("pods", namespace="default", label_selector="app=x"):
            seen.append((event_type, obj.name))

    task = asyncio.create_task(consume(), name="kr8s-watch")
    try:
        await wait_until(lambda: seen == [("ADDED", "existing")], timeout=5)
        created = await Pod(pod("new", labels={"app": "x"}), api=api)
        await created.create()
        await wait_until(lambda: ("ADDED", "new") in seen, timeout=5)
        assert apiserver.server.drop_watches() == 1
        async with asyncio.timeout(5):
            await task  # a dropped watch ends kr8s's iteration cleanly
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    store.create("CustomResourceDefinition", POOL_CRD)
    made = await InferencePool(pool("p1"), api=api)
    await made.create()
    [fetched] = [p async for p in InferencePool.list(api=api, namespace="default")]
    assert fetched.spec["endpointPickerRef"]["kind"] == "Service" and fetched.metadata.generation == 1
    await fetched.patch({"spec": {"targetPorts": [{"number": 8001}]}})
    assert store.get("InferencePool", "p1", namespace="default")["spec"]["targetPorts"] == [{"number": 8001}]
