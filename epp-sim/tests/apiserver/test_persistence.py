"""A store kept in a data directory: a restart keeps every object and the counter, not the watch history."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from apiserver_objects import POOL_CRD, deployment, pod, pool

from epp.clock import ManualClock
from epp_sim.apiserver import ApiError, ApiServer, Store
from epp_sim.apiserver.persistence import FILE_NAME, DataDir, PersistenceError
from epp_sim.waits import wait_until


async def _open(path: Path, **options: Any) -> Store:
    data = await asyncio.to_thread(DataDir.open, path, interval=0.01)
    return Store(persistence=data, **options)


def _saved(path: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((path / FILE_NAME).read_text())
    return doc


def _temp_files(path: Path) -> list[Path]:
    return list(path.glob("*.tmp"))


async def test_restart_keeps_objects_uids_resource_versions_and_crd_kinds(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    store.create("namespaces", {"metadata": {"name": "team"}})
    store.create("customresourcedefinitions", POOL_CRD)
    store.create("InferencePool", pool("p"), namespace="team")
    store.create("deployments", deployment("d"), namespace="team")
    store.patch("deployments", "d", {"spec": {"replicas": 3}}, namespace="team")  # generation 2
    store.create("Pod", pod("a"))
    before = {
        kind: store.list(kind) for kind in ("namespaces", "customresourcedefinitions", "inferencepools", "deployments")
    }
    before["pods"] = store.list("pods")
    counter = store.resource_version
    await store.aclose()

    restored = await _open(tmp_path)
    try:
        assert restored.resource_version == counter
        for kind, objects in before.items():
            assert restored.list(kind) == objects, kind  # uid, resourceVersion, generation, timestamps
        assert restored.get("deployments", "d", namespace="team")["metadata"]["generation"] == 2
        old_uids = {o["metadata"]["uid"] for objects in before.values() for o in objects}

        created = restored.create("InferencePool", pool("q"), namespace="team")  # the CRD serves the kind again
        assert int(created["metadata"]["resourceVersion"]) == counter + 1
        assert created["metadata"]["uid"] not in old_uids
        updated = restored.patch("Pod", "a", {"metadata": {"labels": {"x": "y"}}}, namespace="default")
        assert int(updated["metadata"]["resourceVersion"]) == counter + 2
        assert updated["metadata"]["uid"] == before["pods"][0]["metadata"]["uid"]
    finally:
        await restored.aclose()
    assert _saved(tmp_path)["resourceVersion"] == counter + 2


async def test_writes_reach_the_file_while_serving(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    try:
        created = store.create("Pod", pod("early"))
        await wait_until(
            lambda: (tmp_path / FILE_NAME).exists() and _saved(tmp_path)["resourceVersion"] == store.resource_version,
            timeout=5,
            message="the debounced write",
        )
        [saved] = [e["object"] for e in _saved(tmp_path)["objects"] if e["resource"] == "pods"]
        assert saved == created
        assert not _temp_files(tmp_path)
    finally:
        await store.aclose()


async def test_a_watch_from_before_the_restart_is_gone(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    old = int(store.create("Pod", pod("a"))["metadata"]["resourceVersion"])
    store.create("Pod", pod("b"))
    await store.aclose()

    restored = await _open(tmp_path)
    async with ApiServer(store=restored) as server:
        with pytest.raises(ApiError) as gone:
            restored.subscribe("pods", resource_version=old)
        assert gone.value.code == 410 and gone.value.reason == "Expired"

        url = f"{server.url}/api/v1/namespaces/default/pods?watch=true&resourceVersion={old}"
        async with aiohttp.ClientSession() as http, http.get(url) as resp:
            event = json.loads(await resp.content.readline())
        assert (event["type"], event["object"]["code"], event["object"]["reason"]) == ("ERROR", 410, "Expired")

        # from the restored counter nothing was missed: the watch is served and sees what follows
        async with restored.subscribe("pods", resource_version=restored.resource_version) as watch:
            restored.create("Pod", pod("c"))
            event_type, e = await asyncio.wait_for(anext(watch), 5)
        assert (event_type, e.object["metadata"]["name"]) == ("ADDED", "c")


async def test_a_pending_grace_period_ends_after_the_restart(tmp_path: Path) -> None:
    clock = ManualClock()
    store = await _open(tmp_path, clock=clock, pod_grace_seconds=30)
    store.create("Pod", pod("slow"))
    store.delete("Pod", "slow", namespace="default")
    await store.aclose()

    clock.advance(10)
    restored = await _open(tmp_path, clock=clock)
    try:
        assert restored.get("Pod", "slow", namespace="default")["metadata"]["deletionTimestamp"]
        await wait_until(lambda: clock.sleepers == 1, timeout=5)
        clock.advance(19)
        assert clock.sleepers == 1  # 20 s were left of the 30 s grace period
        clock.advance(1)
        await wait_until(lambda: restored.list("pods") == [], timeout=5)
    finally:
        await restored.aclose()


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (b"", "Expecting value"),
        (b'{"formatVersion": 1, "resourceVersion": 3, "objects": [', "Expecting"),
        (b'{"formatVersion": 7, "resourceVersion": 3, "objects": []}', "formatVersion 1 expected"),
        (b'{"formatVersion": 1, "resourceVersion": -1, "objects": []}', "resourceVersion must be"),
        (
            b'{"formatVersion": 1, "resourceVersion": 3, "objects": [{"group": "", "resource": "pods",'
            b' "object": {"metadata": {"name": "a", "uid": "u", "namespace": "default", "resourceVersion": "9"}}}]}',
            r"objects\[0\]: metadata.resourceVersion '9' is not a number up to 3",
        ),
    ],
)
def test_a_corrupt_file_is_an_error_naming_it(tmp_path: Path, content: bytes, why: str) -> None:
    (tmp_path / FILE_NAME).write_bytes(content)
    with pytest.raises(PersistenceError, match=why) as info:
        DataDir.open(tmp_path)
    assert str(tmp_path / FILE_NAME) in str(info.value)
    assert (tmp_path / FILE_NAME).read_bytes() == content  # never replaced by an empty state
    (tmp_path / FILE_NAME).unlink()
    DataDir.open(tmp_path).close()  # the failed open left the directory unlocked


async def test_an_object_of_an_unserved_kind_is_an_error_naming_the_file(tmp_path: Path) -> None:
    store = await _open(tmp_path)
    store.create("customresourcedefinitions", POOL_CRD)
    store.create("InferencePool", pool("p"), namespace="default")
    await store.aclose()
    doc = _saved(tmp_path)
    doc["objects"] = [e for e in doc["objects"] if e["resource"] != "customresourcedefinitions"]
    (tmp_path / FILE_NAME).write_text(json.dumps(doc))

    data = await asyncio.to_thread(DataDir.open, tmp_path)
    try:
        with pytest.raises(PersistenceError, match="inferencepools.inference.networking.k8s.io p: the resource") as e:
            Store(persistence=data)
        assert str(tmp_path / FILE_NAME) in str(e.value)
    finally:
        data.close()


def test_one_server_per_directory(tmp_path: Path) -> None:
    first = DataDir.open(tmp_path)
    try:
        with pytest.raises(PersistenceError, match="in use by another fake API server"):
            DataDir.open(tmp_path)
    finally:
        first.close()
    DataDir.open(tmp_path).close()
