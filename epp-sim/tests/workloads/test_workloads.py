"""The simulated Deployment controller: pods with a model-load delay, simulators, true status."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from epp.clock import ManualClock
from epp_sim.apiserver.persistence import DataDir
from epp_sim.apiserver.store import Store
from epp_sim.stability import deployment_stable
from epp_sim.waits import wait_until
from epp_sim.workloads import HASH_LABEL, WorkloadsController, sim_config_from_template

LOAD_DELAY = 120.0


def deployment(name: str, replicas: int, *, model: str = "llama", ns: str = "default") -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name, "tier": "decode"}},
                "spec": {
                    "containers": [
                        {
                            "name": "vllm",
                            "image": "vllm",
                            "args": ["--model", model],
                            "ports": [{"containerPort": 8000}],
                        }
                    ]
                },
            },
        },
    }


@pytest.fixture
async def env() -> AsyncIterator[tuple[Store, WorkloadsController, ManualClock]]:
    clock = ManualClock()
    store = Store(clock=clock)  # creationTimestamps follow the test clock
    workloads = WorkloadsController(store, clock=clock, load_delay=LOAD_DELAY, port=0, first_host=150)
    await workloads.start()
    try:
        yield store, workloads, clock
    finally:
        await workloads.stop()
        await store.aclose()


def pods(store: Store, ns: str = "default") -> list[dict[str, Any]]:
    return store.list("pods", namespace=ns)


def status(store: Store, name: str, ns: str = "default") -> dict[str, Any]:
    return dict(store.get("deployments", name, namespace=ns).get("status") or {})


def ready_count(store: Store) -> int:
    return sum(
        1 for p in pods(store) if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"]["conditions"])
    )


async def test_pods_load_then_become_ready_with_a_simulator(
    env: tuple[Store, WorkloadsController, ManualClock],
) -> None:
    store, workloads, clock = env
    store.create("deployments", deployment("llama", 2), namespace="default")
    await wait_until(lambda: len(pods(store)) == 2 and clock.sleepers == 2, timeout=5)

    dep = store.get("deployments", "llama", namespace="default")
    [rs] = store.list("replicasets", namespace="default")
    assert rs["metadata"]["ownerReferences"][0]["uid"] == dep["metadata"]["uid"]
    for p in pods(store):
        assert p["metadata"]["ownerReferences"][0] == {
            "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": rs["metadata"]["name"],
            "uid": rs["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True,
        }  # fmt: skip
        assert p["metadata"]["labels"] == {
            "app": "llama",
            "tier": "decode",
            HASH_LABEL: rs["metadata"]["name"].split("-")[-1],
        }
        assert p["status"]["phase"] == "Pending" and "podIP" not in p["status"]
    await wait_until(lambda: status(store, "llama").get("replicas") == 2, timeout=5)
    assert status(store, "llama")["readyReplicas"] == 0
    assert not deployment_stable(store.get("deployments", "llama", namespace="default"))

    clock.advance(LOAD_DELAY - 1)
    assert ready_count(store) == 0
    clock.advance(1)
    await wait_until(lambda: status(store, "llama").get("readyReplicas") == 2, timeout=10)
    s = status(store, "llama")
    assert (s["replicas"], s["updatedReplicas"], s["availableReplicas"]) == (2, 2, 2)
    assert deployment_stable(store.get("deployments", "llama", namespace="default"))

    ips = sorted(p["status"]["podIP"] for p in pods(store))
    assert ips == ["127.0.0.150", "127.0.0.151"]
    async with aiohttp.ClientSession() as http:
        for p in pods(store):
            port = p["spec"]["containers"][0]["ports"][0]["containerPort"]
            server = workloads.server("default", p["metadata"]["name"])
            assert (server.host, server.port) == (p["status"]["podIP"], port)
            server.pin(waiting=7, kv_cache_usage=0.5)
            async with http.get(f"http://{p['status']['podIP']}:{server.port}/metrics") as resp:
                text = await resp.text()
            assert 'vllm:num_requests_waiting{engine="0",model_name="llama"} 7.0' in text


async def test_scale_up_and_down_through_the_scale_subresource(
    env: tuple[Store, WorkloadsController, ManualClock],
) -> None:
    store, workloads, clock = env
    store.create("deployments", deployment("m", 2), namespace="default")
    await wait_until(lambda: clock.sleepers == 2, timeout=5)
    clock.advance(LOAD_DELAY)
    await wait_until(lambda: status(store, "m").get("readyReplicas") == 2, timeout=10)
    ready_names = {p["metadata"]["name"] for p in pods(store)}

    store.patch("deployments", "m", {"spec": {"replicas": 3}}, namespace="default", subresource="scale")
    await wait_until(lambda: status(store, "m").get("replicas") == 3, timeout=5)
    assert status(store, "m")["readyReplicas"] == 2
    [new] = [p["metadata"]["name"] for p in pods(store) if p["metadata"]["name"] not in ready_names]

    # scale back down before the new pod is Ready: the not-Ready pod goes first
    store.patch("deployments", "m", {"spec": {"replicas": 2}}, namespace="default", subresource="scale")
    await wait_until(lambda: {p["metadata"]["name"] for p in pods(store)} == ready_names, timeout=5)
    await wait_until(lambda: status(store, "m").get("replicas") == 2 and clock.sleepers == 0, timeout=5)

    # all Ready: the newest pod goes first (the ReplicaSet controller's ranking)
    clock.advance(5)
    store.patch("deployments", "m", {"spec": {"replicas": 3}}, namespace="default", subresource="scale")
    await wait_until(lambda: clock.sleepers == 1, timeout=5)
    clock.advance(LOAD_DELAY)
    await wait_until(lambda: status(store, "m").get("readyReplicas") == 3, timeout=10)
    store.patch("deployments", "m", {"spec": {"replicas": 2}}, namespace="default", subresource="scale")
    await wait_until(lambda: {p["metadata"]["name"] for p in pods(store)} == ready_names, timeout=5)

    store.patch("deployments", "m", {"spec": {"replicas": 1}}, namespace="default", subresource="scale")
    await wait_until(
        lambda: len(workloads.servers("default")) == 1 and status(store, "m").get("replicas") == 1, timeout=5
    )
    assert status(store, "m")["readyReplicas"] == 1


async def test_deleting_the_deployment_removes_pods_and_servers(
    env: tuple[Store, WorkloadsController, ManualClock],
) -> None:
    store, workloads, clock = env
    store.create("deployments", deployment("gone", 2), namespace="default")
    await wait_until(lambda: clock.sleepers == 2, timeout=5)
    clock.advance(LOAD_DELAY)
    await wait_until(lambda: len(workloads.servers("default")) == 2, timeout=10)
    store.delete("deployments", "gone", namespace="default")
    await wait_until(lambda: not pods(store) and not workloads.servers("default"), timeout=5)
    assert store.list("replicasets", namespace="default") == []


async def test_zero_delay_and_template_port() -> None:
    store = Store()
    workloads = WorkloadsController(store, load_delay=0, port=0, first_host=160)
    async with workloads:
        store.create("deployments", deployment("fast", 1, model="granite"), namespace="default")
        await wait_until(lambda: status(store, "fast").get("readyReplicas") == 1, timeout=10)
        [p] = pods(store)
        assert workloads.server("default", p["metadata"]["name"]).config.model == "granite"
    await store.aclose()


async def test_without_model_servers_pods_get_addresses_but_nothing_listens() -> None:
    store = Store()
    async with WorkloadsController(store, load_delay=0, port=0, first_host=165, model_servers=False) as workloads:
        store.create("deployments", deployment("bare", 1), namespace="default")
        await wait_until(lambda: status(store, "bare").get("readyReplicas") == 1, timeout=10)
        [p] = pods(store)
        assert p["status"]["podIP"] == "127.0.0.165" and workloads.servers("default") == {}
        port = p["spec"]["containers"][0]["ports"][0]["containerPort"]
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.ClientConnectionError):
                await http.get(f"http://127.0.0.165:{port}/metrics")
    await store.aclose()


def _ips(store: Store) -> dict[str, str]:
    return {p["metadata"]["name"]: p["status"].get("podIP", "") for p in pods(store)}


async def test_a_restored_store_keeps_its_pods_their_addresses_and_simulators(tmp_path: Path) -> None:
    clock = ManualClock()

    async def start() -> tuple[Store, WorkloadsController]:
        data = await asyncio.to_thread(DataDir.open, tmp_path)
        store = Store(clock=clock, persistence=data)
        workloads = WorkloadsController(store, clock=clock, load_delay=LOAD_DELAY, port=0, first_host=180)
        await workloads.start()
        return store, workloads

    store, workloads = await start()
    store.create("deployments", deployment("kept", 2), namespace="default")
    await wait_until(lambda: clock.sleepers == 2, timeout=5)
    clock.advance(LOAD_DELAY)
    await wait_until(lambda: status(store, "kept").get("readyReplicas") == 2, timeout=10)
    store.patch("deployments", "kept", {"spec": {"replicas": 3}}, namespace="default", subresource="scale")
    await wait_until(lambda: clock.sleepers == 1, timeout=5)  # the third pod is loading at the restart
    before = pods(store)
    await workloads.stop()
    await store.aclose()

    store, workloads = await start()
    try:
        assert pods(store) == before
        ready_ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in before if "podIP" in p["status"]}
        await wait_until(lambda: len(workloads.servers("default")) == 2, timeout=10)
        async with aiohttp.ClientSession() as http:
            for name, server in workloads.servers("default").items():
                assert server.host == ready_ips[name]  # the simulator is back where the pod says
                async with http.get(f"{server.url}/metrics") as resp:
                    assert resp.status == 200
        assert clock.sleepers == 1  # the loading pod loads again from the start
        clock.advance(LOAD_DELAY)
        await wait_until(lambda: status(store, "kept").get("readyReplicas") == 3, timeout=10)
        assert {name: ip for name, ip in _ips(store).items() if name in ready_ips} == ready_ips

        store.patch("deployments", "kept", {"spec": {"replicas": 4}}, namespace="default", subresource="scale")
        await wait_until(lambda: clock.sleepers == 1, timeout=5)
        clock.advance(LOAD_DELAY)
        await wait_until(lambda: status(store, "kept").get("readyReplicas") == 4, timeout=10)
        assert len(set(_ips(store).values())) == 4  # no address handed out twice
    finally:
        await workloads.stop()
        await store.aclose()


def test_sim_config_from_template_reads_the_model() -> None:
    assert sim_config_from_template({"spec": {"containers": [{"command": ["vllm", "serve", "qwen"]}]}}).model == "qwen"
    assert sim_config_from_template({"spec": {"containers": [{"args": ["--model=granite"]}]}}).model == "granite"
    assert sim_config_from_template({"spec": {"containers": [{}]}}).model == "meta-llama/Llama-3.1-8B-Instruct"


def test_deployment_stable() -> None:
    def d(spec: int, status: int, ready: int, gen: int = 1, observed: int = 1) -> dict[str, Any]:
        return {
            "metadata": {"generation": gen},
            "spec": {"replicas": spec},
            "status": {"replicas": status, "readyReplicas": ready, "observedGeneration": observed},
        }

    assert deployment_stable(d(2, 2, 2))
    assert not deployment_stable(d(3, 2, 2))  # pods not created yet
    assert not deployment_stable(d(2, 2, 1))  # one loading
    assert not deployment_stable(d(2, 3, 2))  # one terminating / surging
    assert not deployment_stable(d(2, 2, 2, gen=2, observed=1))  # status is stale
