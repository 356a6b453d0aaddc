"""Every kind the fake API server and its workload controller create, read back by the typed clients.

The official ``kubernetes`` client deserializes into pydantic models: an object missing a field
its schema requires (a container status without ``image``), or with a field of the wrong type,
fails to list, read or watch. It lists, reads and watches each kind here, and so does kr8s.
Objects come from kubectl's imperative commands (protobuf), the token controller (a
service-account-token Secret), the workload controller (ReplicaSets, pods, status) and the
store; pods are read while their model loads and again once they are Ready.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import kr8s
import kr8s.asyncio
import pytest
from apiserver_objects import POOL_CRD
from kubernetes import client, config, watch

from epp.clock import ManualClock
from epp_sim.apiserver import RunningApiServer, running_apiserver
from epp_sim.stack.kubectl import Kubectl
from epp_sim.waits import wait_until
from epp_sim.workloads import WorkloadsController

KINDS = [
    "namespaces", "pods", "serviceaccounts", "secrets", "configmaps", "services", "deployments", "replicasets",
    "roles", "clusterroles", "rolebindings", "clusterrolebindings", "leases", "customresourcedefinitions",
]  # fmt: skip
CREATE = [
    ("namespace", "obs"),
    ("serviceaccount", "prom", "-n", "obs"),
    ("secret", "generic", "creds", "--from-literal=user=prom", "-n", "obs"),
    ("configmap", "cfg", "--from-literal=a=b", "-n", "obs"),
    ("deployment", "vllm", "--image=vllm/vllm-openai:v0.11", "--replicas=2", "--port=8000", "-n", "obs"),
    ("service", "clusterip", "vllm", "--tcp=8000:8000", "-n", "obs"),
    ("role", "reader", "--verb=get,list", "--resource=pods", "-n", "obs"),
    ("rolebinding", "reader", "--role=reader", "--serviceaccount=obs:prom", "-n", "obs"),
    ("clusterrole", "metrics", "--verb=get", "--non-resource-url=/metrics"),
    ("clusterrolebinding", "metrics", "--clusterrole=metrics", "--serviceaccount=obs:prom"),
]
Named = list[str]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[RunningApiServer, ManualClock]]:
    """A server with its workload controller (no model servers) holding one object of every kind, at least."""
    clock = ManualClock(wall_start=1_900_000_000.0)
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig", clock=clock) as api:
        store = api.server.store
        async with WorkloadsController(store, clock=clock, load_delay=30, model_servers=False):
            kubectl = Kubectl(api.kubeconfig, tmp_path / "home")
            for args in CREATE:
                await kubectl.run("create", *args)
            token_secret = {"kubernetes.io/service-account.name": "prom"}
            store.create(
                "Secret",
                {
                    "metadata": {"name": "prom-token", "annotations": token_secret},
                    "type": "kubernetes.io/service-account-token",
                },
                namespace="obs",
            )
            store.create("Lease", {"metadata": {"name": "epp"}, "spec": {"holderIdentity": "epp-0"}}, namespace="obs")
            store.create("CustomResourceDefinition", POOL_CRD)
            await wait_until(lambda: len(store.list("Pod", namespace="obs")) == 2, timeout=10)
            yield api, clock


def _typed_api(kubeconfig: Path) -> dict[str, tuple[Callable[..., Any], Callable[[str, str], Any]]]:
    """kind → (list across namespaces, read one by name and namespace), all typed."""
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    core, apps = client.CoreV1Api(api_client), client.AppsV1Api(api_client)
    rbac, lease = client.RbacAuthorizationV1Api(api_client), client.CoordinationV1Api(api_client)
    crds = client.ApiextensionsV1Api(api_client)
    return {
        "namespaces": (core.list_namespace, lambda n, ns: core.read_namespace(n)),
        "pods": (core.list_pod_for_all_namespaces, core.read_namespaced_pod),
        "serviceaccounts": (core.list_service_account_for_all_namespaces, core.read_namespaced_service_account),
        "secrets": (core.list_secret_for_all_namespaces, core.read_namespaced_secret),
        "configmaps": (core.list_config_map_for_all_namespaces, core.read_namespaced_config_map),
        "services": (core.list_service_for_all_namespaces, core.read_namespaced_service),
        "deployments": (apps.list_deployment_for_all_namespaces, apps.read_namespaced_deployment),
        "replicasets": (apps.list_replica_set_for_all_namespaces, apps.read_namespaced_replica_set),
        "roles": (rbac.list_role_for_all_namespaces, rbac.read_namespaced_role),
        "clusterroles": (rbac.list_cluster_role, lambda n, ns: rbac.read_cluster_role(n)),
        "rolebindings": (rbac.list_role_binding_for_all_namespaces, rbac.read_namespaced_role_binding),
        "clusterrolebindings": (rbac.list_cluster_role_binding, lambda n, ns: rbac.read_cluster_role_binding(n)),
        "leases": (lease.list_lease_for_all_namespaces, lease.read_namespaced_lease),
        "customresourcedefinitions": (
            crds.list_custom_resource_definition,
            lambda n, ns: crds.read_custom_resource_definition(n),
        ),
    }


def _key(meta: Any) -> str:
    return f"{meta.namespace or ''}/{meta.name}"


def _typed_read_everything(kubeconfig: Path) -> dict[str, Named]:
    """Blocking (run in a thread): list, read and watch every kind with the typed client; names per kind."""
    seen: dict[str, Named] = {}
    for kind, (list_all, read) in _typed_api(kubeconfig).items():
        listed = list_all()
        names = sorted(_key(o.metadata) for o in listed.items)
        for o in listed.items:
            assert read(o.metadata.name, o.metadata.namespace).metadata.uid == o.metadata.uid
        events: Named = []
        w = watch.Watch()
        for event in w.stream(list_all, timeout_seconds=10):
            assert event["type"] == "ADDED" and type(event["object"]) is type(listed.items[0])
            events.append(_key(event["object"].metadata))
            if len(events) == len(names):
                w.stop()
        assert sorted(events) == names, kind
        seen[kind] = names
    return seen


def _typed_answers(kubeconfig: Path) -> tuple[Any, Any, Any]:
    """Blocking: the objects the server answers rather than stores (a token, its review, an access review, a scale)."""
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    core = client.CoreV1Api(api_client)
    token = core.create_namespaced_service_account_token(
        "prom", "obs", client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[]))
    )
    review = client.AuthenticationV1Api(api_client).create_token_review(
        client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token.status.token))
    )
    access = client.AuthorizationV1Api(api_client).create_subject_access_review(
        client.V1SubjectAccessReview(
            spec=client.V1SubjectAccessReviewSpec(
                user=review.status.user.username,
                groups=review.status.user.groups,
                non_resource_attributes=client.V1NonResourceAttributes(path="/metrics", verb="get"),
            )
        )
    )
    scale = client.AppsV1Api(api_client).read_namespaced_deployment_scale("vllm", "obs")
    return review, access, scale


async def _kr8s_read_everything(kubeconfig: Path) -> dict[str, Named]:
    api = await kr8s.asyncio.api(kubeconfig=str(kubeconfig))
    seen: dict[str, Named] = {}
    for kind in KINDS:
        listed = [o async for o in api.get(kind, namespace=kr8s.ALL)]
        names = sorted(f"{o.namespace or ''}/{o.name}" for o in listed)
        for o in listed:
            uid = o.metadata.uid
            await o.refresh()  # a GET by name
            assert o.metadata.uid == uid
        events: Named = []
        stream = api.watch(kind, namespace=kr8s.ALL)
        async with asyncio.timeout(10):
            async for event_type, o in stream:
                assert event_type == "ADDED"
                events.append(f"{o.namespace or ''}/{o.name}")
                if len(events) == len(names):
                    break
        await stream.aclose()
        assert sorted(events) == names, kind
        seen[kind] = names
    return seen


def _pod_states(store_pods: list[dict[str, Any]]) -> list[str]:
    return sorted(next(iter(c["state"])) for p in store_pods for c in p["status"].get("containerStatuses", []))


async def test_typed_clients_list_read_and_watch_every_kind_while_pods_load_and_once_ready(
    cluster: tuple[RunningApiServer, ManualClock],
) -> None:
    api, clock = cluster
    store = api.server.store
    assert _pod_states(store.list("Pod", namespace="obs")) == ["waiting", "waiting"]  # ContainerCreating
    typed = await asyncio.to_thread(_typed_read_everything, api.kubeconfig)
    assert typed == await _kr8s_read_everything(api.kubeconfig)
    assert set(typed) == set(KINDS) and all(typed.values())
    assert len(typed["pods"]) == 2 and "obs/prom-token" in typed["secrets"] and "obs/creds" in typed["secrets"]
    assert len(typed["replicasets"]) == 1 and typed["leases"] == ["obs/epp"]

    clock.advance(30)  # the models have loaded
    await wait_until(lambda: _pod_states(store.list("Pod", namespace="obs")) == ["running", "running"], timeout=10)
    store.patch("Deployment", "vllm", {"spec": {"replicas": 3}}, namespace="obs")  # a third pod starts loading
    await wait_until(lambda: len(store.list("Pod", namespace="obs")) == 3, timeout=10)
    assert _pod_states(store.list("Pod", namespace="obs")) == ["running", "running", "waiting"]
    typed = await asyncio.to_thread(_typed_read_everything, api.kubeconfig)
    assert len(typed["pods"]) == 3 and typed == await _kr8s_read_everything(api.kubeconfig)

    [ready, *_] = [p["metadata"]["name"] for p in store.list("Pod", namespace="obs") if p["status"].get("podIP")]
    pod = await asyncio.to_thread(_read_pod, api.kubeconfig, ready)
    [status] = pod.status.container_statuses
    assert (status.name, status.image, status.ready, status.started, status.restart_count) == (
        "vllm-openai", "vllm/vllm-openai:v0.11", True, True, 0
    )  # fmt: skip
    assert status.image_id.startswith("vllm/vllm-openai@sha256:") and status.container_id.startswith("containerd://")
    review, access, scale = await asyncio.to_thread(_typed_answers, api.kubeconfig)
    assert review.status.authenticated and review.status.user.username == "system:serviceaccount:obs:prom"
    assert access.status.allowed and (scale.spec.replicas, scale.status.replicas) == (3, 3)


def _read_pod(kubeconfig: Path, name: str) -> Any:
    return client.CoreV1Api(config.new_client_from_config(config_file=str(kubeconfig))).read_namespaced_pod(name, "obs")
