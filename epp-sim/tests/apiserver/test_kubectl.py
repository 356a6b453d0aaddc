"""The real kubectl against the fake API server: apply (client- and server-side), get, watch, label, patch, scale."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from apiserver_objects import POOL_CRD, binding, deployment, pod, pool, role

from epp.clock import ManualClock
from epp_sim.apiserver import RunningApiServer, running_apiserver
from epp_sim.stack import kubectl as stack_kubectl
from epp_sim.waits import wait_until

KUBECTL = str(Path(sys.executable).parent / "kubectl")


class Kubectl:
    """Runs kubectl with this server's kubeconfig, a private HOME and discovery cache."""

    def __init__(self, kubeconfig: Path, home: Path) -> None:
        self.kubeconfig = kubeconfig
        self.home = home
        self.env = {**os.environ, "HOME": str(home)}
        self.env.pop("KUBECONFIG", None)

    def argv(self, *args: str) -> list[str]:
        return [KUBECTL, "--kubeconfig", str(self.kubeconfig), "--cache-dir", str(self.home / "cache"), *args]

    async def run(self, *args: str, ok: bool = True) -> tuple[int, str, str]:
        proc = await asyncio.create_subprocess_exec(
            *self.argv(*args),
            env=self.env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        async with asyncio.timeout(20):
            out, err = await proc.communicate()
        stderr = "\n".join(line for line in err.decode().splitlines() if "version difference" not in line)
        assert proc.returncode is not None
        if ok:
            assert proc.returncode == 0, f"kubectl {' '.join(args)} failed: {stderr}"
        return proc.returncode, out.decode(), stderr


@pytest.fixture
async def kubectl(apiserver: RunningApiServer, tmp_path: Path) -> AsyncIterator[Kubectl]:
    yield Kubectl(apiserver.kubeconfig, tmp_path)


def _write(path: Path, *docs: dict[str, Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(docs, sort_keys=False))
    return path


async def test_apply_crd_then_objects_reapply_and_reject_unknown_fields(
    kubectl: Kubectl, apiserver: RunningApiServer, tmp_path: Path
) -> None:
    store = apiserver.server.store
    _write(tmp_path / "crds" / "pool-crd.yaml", POOL_CRD)
    objects = tmp_path / "objects"
    _write(objects / "pool.yaml", pool("pool1"))
    _write(
        objects / "apps.yaml",
        deployment("vllm", replicas=2),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"}, "data": {"a": "1"}},
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "epp"},
            "spec": {"selector": {"app": "epp"}, "ports": [{"name": "grpc", "port": 9002}]},
        },
    )
    _, out, _ = await kubectl.run("apply", "-f", str(tmp_path / "crds"))
    assert "customresourcedefinition.apiextensions.k8s.io/inferencepools.inference.networking.k8s.io created" in out
    _, out, _ = await kubectl.run("apply", "-f", str(objects))
    assert sorted(out.split("\n")[:-1]) == sorted([
        "inferencepool.inference.networking.k8s.io/pool1 created", "deployment.apps/vllm created",
        "configmap/cfg created", "service/epp created"])  # fmt: skip
    p = store.get("InferencePool", "pool1", namespace="default")
    assert p["spec"]["endpointPickerRef"]["failureMode"] == "FailClose"  # schema default
    before = store.get("Deployment", "vllm", namespace="default")["metadata"]
    _, out, _ = await kubectl.run("apply", "-f", str(objects))
    assert out.count("unchanged") == 4
    after = store.get("Deployment", "vllm", namespace="default")["metadata"]
    assert (after["generation"], after["resourceVersion"]) == (before["generation"], before["resourceVersion"])
    _, out, _ = await kubectl.run("get", "infpool")
    assert out.split("\n")[0].split() == ["NAME", "PORT", "AGE"] and out.split("\n")[1].split()[:2] == ["pool1", "8000"]
    bad = _write(tmp_path / "bad" / "pool.yaml", pool("pool2", bogus=True))
    code, _, err = await kubectl.run("apply", "-f", str(bad), ok=False)
    assert code != 0 and 'unknown field "spec.bogus"' in err
    await kubectl.run("apply", "--validate=false", "-f", str(bad))
    assert "bogus" not in store.get("InferencePool", "pool2", namespace="default")["spec"]  # pruned


async def test_apply_service_account_and_rbac_get_wide_reject_unknown_fields_and_role_ref_change(
    kubectl: Kubectl, apiserver: RunningApiServer, tmp_path: Path
) -> None:
    sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "epp"}}
    rb, crb = binding("epp", "epp-reader"), binding("epp-metrics", "metrics-reader", cluster=True)
    cluster_role = role("metrics-reader", cluster=True, verbs=["get"], nonResourceURLs=["/metrics"])
    objects = _write(tmp_path / "rbac.yaml", sa, role("epp-reader"), rb, cluster_role, crb)
    _, out, _ = await kubectl.run("apply", "-f", str(objects))
    assert out.splitlines() == [
        "serviceaccount/epp created",
        "role.rbac.authorization.k8s.io/epp-reader created",
        "rolebinding.rbac.authorization.k8s.io/epp created",
        "clusterrole.rbac.authorization.k8s.io/metrics-reader created",
        "clusterrolebinding.rbac.authorization.k8s.io/epp-metrics created",
    ]
    _, out, _ = await kubectl.run("apply", "-f", str(objects))
    assert out.count(" unchanged") == 5
    _, out, _ = await kubectl.run("get", "sa")
    assert [line.split()[:2] for line in out.splitlines()] == [["NAME", "SECRETS"], ["epp", "0"]]
    _, out, _ = await kubectl.run("get", "clusterrolebindings", "-o", "wide")
    header, row = out.splitlines()
    assert header.split() == ["NAME", "ROLE", "AGE", "USERS", "GROUPS", "SERVICEACCOUNTS"]
    assert row.split()[:2] == ["epp-metrics", "ClusterRole/metrics-reader"] and row.split()[-1] == "default/epp"
    _, out, _ = await kubectl.run("get", "roles,clusterroles", "-o", "name")
    assert out.split() == [
        "role.rbac.authorization.k8s.io/epp-reader",
        "clusterrole.rbac.authorization.k8s.io/metrics-reader",
    ]

    bogus = _write(tmp_path / "bogus.yaml", {**sa, "metadata": {"name": "other"}, "tokens": []})
    code, _, err = await kubectl.run("apply", "-f", str(bogus), ok=False)
    assert code != 0 and 'unknown field "tokens"' in err
    rb["roleRef"]["name"] = "someone-else"
    code, _, err = await kubectl.run("apply", "-f", str(_write(tmp_path / "moved.yaml", rb)), ok=False)
    assert code != 0 and "roleRef: Invalid value" in err and "cannot change roleRef" in err
    store = apiserver.server.store
    assert store.get("RoleBinding", "epp", namespace="default")["roleRef"]["name"] == "epp-reader"
    assert [o["metadata"]["name"] for o in store.list("ServiceAccount")] == ["epp"]


async def test_get_label_patch_status_scale_server_side_apply_delete(
    kubectl: Kubectl, apiserver: RunningApiServer, tmp_path: Path
) -> None:
    store = apiserver.server.store
    store.create("Pod", pod("web-0"))
    store.patch("Pod", "web-0", {"status": {"phase": "Running", "containerStatuses": [
        {"name": "main", "ready": True, "restartCount": 1, "state": {"running": {}}}]}},
        namespace="default", subresource="status")  # fmt: skip
    store.create("Deployment", deployment("vllm", replicas=2), namespace="default")
    _, out, _ = await kubectl.run("get", "pods")
    header, row = out.split("\n")[:2]
    assert header.split() == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert row.split()[:4] == ["web-0", "1/1", "Running", "1"]
    await kubectl.run("label", "pod", "web-0", "tier=decode")
    assert store.get("Pod", "web-0", namespace="default")["metadata"]["labels"] == {"tier": "decode"}
    await kubectl.run(
        "patch", "pod", "web-0", "--subresource=status", "--type=merge", "-p", '{"status":{"phase":"Failed"}}'
    )
    assert store.get("Pod", "web-0", namespace="default")["status"]["phase"] == "Failed"
    await kubectl.run("scale", "deployment", "vllm", "--replicas=4")
    dep = store.get("Deployment", "vllm", namespace="default")
    assert (dep["spec"]["replicas"], dep["metadata"]["generation"]) == (4, 2)
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "ssa"}, "data": {"x": "1", "y": "2"}}
    _, out, _ = await kubectl.run("apply", "--server-side", "-f", str(_write(tmp_path / "ssa.yaml", cm)))
    assert out.strip() == "configmap/ssa serverside-applied"
    await kubectl.run("apply", "--server-side", "-f", str(_write(tmp_path / "ssa.yaml", {**cm, "data": {"x": "2"}})))
    live = store.get("ConfigMap", "ssa", namespace="default")
    assert live["data"] == {"x": "2"} and live["metadata"]["managedFields"][0]["manager"] == "kubectl"
    _, out, _ = await kubectl.run("delete", "pod", "web-0")
    assert 'pod "web-0" deleted' in out
    assert store.list("Pod") == []


async def test_get_watch_sees_a_change(apiserver: RunningApiServer, tmp_path: Path) -> None:
    store = apiserver.server.store
    store.create("ConfigMap", {"metadata": {"name": "first"}}, namespace="default")
    async with stack_kubectl.Kubectl(apiserver.kubeconfig, tmp_path).streaming("get", "configmaps", "-w") as watch:
        await watch.read_until("first")
        await wait_until(lambda: store.events.open_watches() == 1, timeout=10)
        store.create("ConfigMap", {"metadata": {"name": "second"}, "data": {"a": "1", "b": "2"}}, namespace="default")
        lines = await watch.read_until("second")
    assert [line.split()[:2] for line in lines if "second" in line] == [["second", "2"]]


async def test_delete_waits_for_the_pod_grace_period(tmp_path: Path) -> None:
    clock = ManualClock()
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig", clock=clock, pod_grace_seconds=30) as running:
        store = running.server.store
        store.create("Pod", pod("slow"))
        kubectl = Kubectl(running.kubeconfig, tmp_path)
        delete = asyncio.create_task(kubectl.run("delete", "pod", "slow"), name="kubectl-delete")
        try:
            await wait_until(
                lambda: clock.sleepers == 1 and store.events.open_watches() == 1,
                timeout=10,
                message="pod marked deleting and kubectl waiting on a watch-list",
            )
            assert store.get("Pod", "slow", namespace="default")["metadata"]["deletionGracePeriodSeconds"] == 30
            assert not delete.done()
            clock.advance(30)
            async with asyncio.timeout(10):
                _, out, _ = await delete
            assert 'pod "slow" deleted' in out and store.list("Pod") == []
        finally:
            delete.cancel()
            await asyncio.gather(delete, return_exceptions=True)
