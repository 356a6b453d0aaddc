"""kubectl 1.37's imperative commands against the fake API server.

``kubectl create <generator>`` sends built-in kinds as protobuf (checked in its ``-v=8`` log).
Each generator's object, as kubectl itself prints it with ``--dry-run=client -o json`` (Go's
JSON encoding), must be what the server stored from the protobuf body: every field kubectl set,
with the value it set (the server may add its defaults). Then the day-two commands on a
Deployment run by the simulated workload controller: scale, label, annotate, rollout status,
get -o json|yaml|wide, get --watch, delete --wait.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from epp.clock import ManualClock
from epp_sim.apiserver import RunningApiServer, running_apiserver
from epp_sim.pki import make_pki
from epp_sim.stack.kubectl import Kubectl
from epp_sim.waits import wait_until
from epp_sim.workloads import WorkloadsController

PROTOBUF_SENT = "Content-Type: application/vnd.kubernetes.protobuf"


def _missing(want: Any, got: Any, path: str = "") -> list[str]:
    """Where ``want`` is not contained in ``got`` (objects may have more keys; nulls in ``want`` are absent)."""
    if isinstance(want, dict) and isinstance(got, dict):
        return [m for k, v in want.items() if v is not None for m in _missing(v, got.get(k), f"{path}.{k}")]
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [m for i, (w, g) in enumerate(zip(want, got, strict=True)) for m in _missing(w, g, f"{path}[{i}]")]
    return [] if want == got else [f"{path}: kubectl meant {want!r}, the server has {got!r}"]


@pytest.fixture
async def kubectl(apiserver: RunningApiServer, tmp_path: Path) -> Kubectl:
    return Kubectl(apiserver.kubeconfig, tmp_path / "home")


async def test_create_generators_send_protobuf_that_the_server_reads_as_kubectl_meant(
    apiserver: RunningApiServer, kubectl: Kubectl, tmp_path: Path
) -> None:
    pki = await asyncio.to_thread(make_pki, tmp_path / "pki")
    binary = tmp_path / "blob.bin"
    await asyncio.to_thread(binary.write_bytes, bytes(range(256)))
    generators = [
        ("namespace", "obs"),
        ("serviceaccount", "prom", "-n", "obs"),
        ("secret", "generic", "creds", "--from-literal=user=prom", "--type=example.com/creds", "-n", "obs"),
        ("secret", "docker-registry", "pull", "--docker-server=r.example", "--docker-username=u",
         "--docker-password=p", "-n", "obs"),
        ("secret", "tls", "cert", f"--cert={pki.server_dir / 'tls.crt'}", f"--key={pki.server_dir / 'tls.key'}",
         "-n", "obs"),
        ("configmap", "cfg", "--from-literal=mode=fast", f"--from-file=blob={binary}", "-n", "obs"),
        ("deployment", "vllm", "--image=vllm/vllm-openai:v0.11", "--replicas=0", "--port=8000", "-n", "obs",
         "--", "vllm", "serve", "m"),
        ("service", "clusterip", "vllm", "--tcp=80:8000", "--tcp=9000:http", "-n", "obs"),
        ("service", "nodeport", "edge", "--tcp=80:8080", "--node-port=30080", "-n", "obs"),
        ("service", "externalname", "ext", "--external-name=example.com", "-n", "obs"),
        ("role", "reader", "--verb=get,list,watch", "--resource=pods,deployments.apps", "--resource-name=x",
         "-n", "obs"),
        ("clusterrole", "metrics", "--verb=get", "--non-resource-url=/metrics"),
        ("clusterrole", "combined", "--aggregation-rule=rbac.example.com/aggregate=true"),
        ("rolebinding", "reader", "--role=reader", "--serviceaccount=obs:prom", "--user=bob", "-n", "obs"),
        ("clusterrolebinding", "metrics", "--clusterrole=metrics", "--group=ops", "--serviceaccount=obs:prom"),
    ]  # fmt: skip
    store = apiserver.server.store
    for args in generators:
        cut = args.index("--") if "--" in args else len(args)
        flags, command = args[:cut], args[cut:]  # kubectl's flags go before a container command
        meant = json.loads((await kubectl.run("create", *flags, "--dry-run=client", "-o", "json", *command)).stdout)
        sent = await kubectl.run("create", *flags, "-v=8", *command)
        assert PROTOBUF_SENT in sent.stderr, args
        meta = meant["metadata"]
        stored = store.get(meant["kind"], meta["name"], namespace=meta.get("namespace"))
        meant.pop("status", None)  # a create resets status, as on a real server
        assert _missing(meant, stored) == [], args
    assert base64.b64decode(store.get("ConfigMap", "cfg", namespace="obs")["binaryData"]["blob"]) == bytes(range(256))
    assert store.get("Deployment", "vllm", namespace="obs")["spec"]["replicas"] == 0  # zero, not "unset"

    token = await kubectl.run("create", "token", "prom", "-n", "obs", "--duration=30m", "-v=8")
    assert PROTOBUF_SENT in token.stderr
    claims = json.loads(base64.urlsafe_b64decode(token.stdout.strip().split(".")[1] + "=="))
    assert claims["sub"] == "system:serviceaccount:obs:prom" and claims["exp"] - claims["iat"] == 1800


async def test_a_create_the_server_cannot_take_fails_with_the_servers_reason(kubectl: Kubectl) -> None:
    result = await kubectl.run("create", "serviceaccount", "x", "-n", "nowhere", check=False)
    assert result.returncode == 1 and 'namespaces "nowhere" not found' in result.stderr
    result = await kubectl.run("create", "namespace", "Bad_Name", check=False)
    assert result.returncode == 1 and "metadata.name: Invalid value: 'Bad_Name'" in result.stderr


@pytest.fixture
async def workloads(tmp_path: Path) -> AsyncIterator[tuple[RunningApiServer, ManualClock, Kubectl]]:
    clock = ManualClock(wall_start=1_900_000_000.0)
    async with (
        running_apiserver(kubeconfig_path=tmp_path / "kubeconfig", clock=clock) as api,
        WorkloadsController(api.server.store, clock=clock, load_delay=30, model_servers=False),
    ):
        yield api, clock, Kubectl(api.kubeconfig, tmp_path / "home")


async def test_scale_label_annotate_rollout_status_get_watch_and_delete_wait(
    workloads: tuple[RunningApiServer, ManualClock, Kubectl],
) -> None:
    api, clock, kubectl = workloads
    store = api.server.store
    await kubectl.run("create", "deployment", "vllm", "--image=vllm/vllm-openai:v0.11", "--replicas=2", "--port=8000")
    controller_watches = store.events.open_watches()  # the workload controller's own
    rollout = asyncio.create_task(kubectl.run("rollout", "status", "deployment/vllm"), name="kubectl-rollout-status")
    try:
        await wait_until(
            lambda: store.events.open_watches() > controller_watches, timeout=10, message="rollout status watching"
        )
        assert not rollout.done()  # the models are still loading
        clock.advance(30)
        async with asyncio.timeout(10):
            done = await rollout
        assert 'deployment "vllm" successfully rolled out' in done.stdout
    finally:
        rollout.cancel()
        await asyncio.gather(rollout, return_exceptions=True)

    header, *rows = (await kubectl.run("get", "pods", "-o", "wide")).stdout.splitlines()
    assert header.split()[:7] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP", "NODE"]
    assert sorted(r.split()[5] for r in rows) == ["127.0.0.100", "127.0.0.101"]
    assert {tuple(r.split()[1:3]) for r in rows} == {("1/1", "Running")}

    async with kubectl.streaming("get", "pods", "--watch") as watch:
        await watch.read_until("Running")
        await wait_until(
            lambda: store.events.open_watches() > controller_watches, timeout=10, message="get --watch watching"
        )
        await kubectl.run("scale", "deployment", "vllm", "--replicas=3")
        await watch.read_until("ContainerCreating")  # the third pod, loading
    dep = store.get("Deployment", "vllm", namespace="default")
    assert (dep["spec"]["replicas"], dep["metadata"]["generation"]) == (3, 2)

    await kubectl.run("label", "deployment", "vllm", "tier=decode")
    await kubectl.run("annotate", "deployment", "vllm", "owner=platform-team")
    as_json = json.loads((await kubectl.run("get", "deployment", "vllm", "-o", "json")).stdout)
    as_yaml = yaml.safe_load((await kubectl.run("get", "deployment", "vllm", "-o", "yaml")).stdout)
    assert as_json == as_yaml
    assert as_json["metadata"]["labels"] == {"app": "vllm", "tier": "decode"}
    assert as_json["metadata"]["annotations"] == {"owner": "platform-team"}
    assert as_json["status"]["replicas"] == 3 and as_json["status"]["readyReplicas"] == 2

    deleted = await kubectl.run("delete", "deployment", "vllm", "--wait")
    assert 'deployment.apps "vllm" deleted' in deleted.stdout
    assert store.list("Deployment", namespace="default") == []
    await wait_until(lambda: store.list("Pod", namespace="default") == [], timeout=10, message="pods collected")
