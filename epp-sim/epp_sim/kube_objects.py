"""The Kubernetes objects simulated pools are made of: one definition of each.

A simulated pod is a Pod whose status says what a kubelet would say once its container runs:
``Running``, its own ``podIP`` (the simulator's loopback address), the ``Ready`` condition and
container statuses with every field a kubelet sets (image, imageID, containerID, started), so
the typed clients (``kubernetes``' pydantic models) read it.
The local stack, the hermetic harness, the benchmarks and the simulated workload controller all
build pods here, so "Ready" means the same thing everywhere. The inference objects (pool,
objective, model, rewrite) are built here too, for our tests and for a platform team's own.
Objectives and rewrites exist in two API groups with one schema: GIE's
(``inference.networking.x-k8s.io``, the default here) and the llm-d router's (``llm-d.ai``); pass
``group=`` to choose. Pure functions returning plain dicts.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "LLM_D_GROUP",
    "V1ALPHA2_POOL_GROUP",
    "V1_POOL_GROUP",
    "PoolMode",
    "inference_model",
    "inference_objective",
    "inference_pool",
    "model_rewrite",
    "pool_ref",
    "pod",
    "pod_status_loading",
    "pod_status_ready",
]

V1_POOL_GROUP = "inference.networking.k8s.io"
V1ALPHA2_POOL_GROUP = "inference.networking.x-k8s.io"
LLM_D_GROUP = "llm-d.ai"
PoolMode = Literal["v1", "v1alpha2", "standalone"]

_CONTAINER = "vllm"
_IMAGE = "epp-sim/vllm"
_CONTAINERS: tuple[Mapping[str, Any], ...] = ({"name": _CONTAINER, "image": _IMAGE},)
_NODE = "sim-node"


def pod(
    name: str,
    labels: Mapping[str, str],
    *,
    namespace: str = "default",
    port: int | None = None,
    container: str = _CONTAINER,
) -> dict[str, Any]:
    """A Pod manifest with one model-server container (listening on ``port`` when given)."""
    spec: dict[str, Any] = {"name": container, "image": _IMAGE}
    if port is not None:
        spec["ports"] = [{"name": "http", "containerPort": port}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {"nodeName": _NODE, "containers": [spec]},
    }


def _image_id(image: str) -> str:
    """What a container runtime reports for ``image``: its repository and a (made-up, stable) digest."""
    ref = image.split("@", 1)[0]
    repository = ref.rsplit(":", 1)[0] if ":" in ref.rsplit("/", 1)[-1] else ref  # a tag, not a registry port
    return f"{repository}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def _container_status(container: Mapping[str, Any], *, running: bool, ready: bool, pod_uid: str) -> dict[str, Any]:
    """One ``containerStatuses`` entry with every field a kubelet sets (the typed clients require image and imageID)."""
    name, image = str(container.get("name", _CONTAINER)), str(container.get("image", _IMAGE))
    status: dict[str, Any] = {
        "name": name,
        "image": image,
        "imageID": "",
        "ready": ready,
        "restartCount": 0,
        "started": running,
        "lastState": {},
        "state": {"waiting": {"reason": "ContainerCreating"}},
    }
    if running:
        digest = hashlib.sha256(f"{pod_uid}/{name}".encode()).hexdigest()
        status.update(imageID=_image_id(image), containerID=f"containerd://{digest}", state={"running": {}})
    return status


def pod_status_loading(*, containers: Sequence[Mapping[str, Any]] = _CONTAINERS) -> dict[str, Any]:
    """Scheduled, containers still being created (the model is loading): not Ready, no IP yet."""
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        ],
        "containerStatuses": [_container_status(c, running=False, ready=False, pod_uid="") for c in containers],
    }


def pod_status_ready(
    ip: str, *, containers: Sequence[Mapping[str, Any]] = _CONTAINERS, pod_uid: str = "", ready: bool = True
) -> dict[str, Any]:
    """Running at ``ip`` (``containers``: the pod spec's); ``ready=False`` is a running pod that fails its probe."""
    flag = "True" if ready else "False"
    return {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "ContainersReady", "status": flag},
            {"type": "Ready", "status": flag},
        ],
        "containerStatuses": [
            _container_status(c, running=True, ready=ready, pod_uid=pod_uid or ip) for c in containers
        ],
    }


def inference_pool(
    mode: PoolMode, name: str, labels: Mapping[str, str], port: int, *, namespace: str = "default", ranks: int = 1
) -> dict[str, Any]:
    """The InferencePool of ``mode`` (v1 or v1alpha2) selecting ``labels`` on ``port`` (and the next
    ``ranks - 1`` ports: data-parallel ranks, v1 only)."""
    meta = {"name": name, "namespace": namespace}
    if mode == "v1alpha2":
        if ranks != 1:
            raise ValueError("a v1alpha2 InferencePool has one target port: no data-parallel ranks")
        return {
            "apiVersion": f"{V1ALPHA2_POOL_GROUP}/v1alpha2",
            "kind": "InferencePool",
            "metadata": meta,
            "spec": {"selector": dict(labels), "targetPortNumber": port, "extensionRef": {"name": "epp"}},
        }
    if mode == "v1":
        return {
            "apiVersion": f"{V1_POOL_GROUP}/v1",
            "kind": "InferencePool",
            "metadata": meta,
            "spec": {
                "selector": {"matchLabels": dict(labels)},
                "targetPorts": [{"number": port + r} for r in range(ranks)],
                "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
            },
        }
    raise ValueError(f"no InferencePool in {mode!r} mode (standalone selects pods by label)")


def pool_ref(pool: str, mode: PoolMode = "v1") -> dict[str, str]:
    """A ``poolRef`` to the pool of ``mode``: without a group it means the v1 pool (the CRDs' default)."""
    return {"name": pool, "group": V1ALPHA2_POOL_GROUP} if mode == "v1alpha2" else {"name": pool}


def inference_objective(
    name: str,
    priority: int | None,
    pool: str,
    *,
    mode: PoolMode = "v1",
    namespace: str = "default",
    group: str = V1ALPHA2_POOL_GROUP,
) -> dict[str, Any]:
    """An InferenceObjective: requests naming it (``x-llm-d-inference-objective``) get ``priority``."""
    spec: dict[str, Any] = {"poolRef": pool_ref(pool, mode)}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": f"{group}/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def inference_model(
    model: str,
    pool: str,
    *,
    criticality: str = "Standard",
    targets: Mapping[str, int] | None = None,
    name: str | None = None,
    namespace: str = "default",
) -> dict[str, Any]:
    """A v1alpha2 InferenceModel serving ``model`` (split over ``targets``: name → weight), named ``name or model``."""
    spec: dict[str, Any] = {"modelName": model, "criticality": criticality, "poolRef": {"name": pool}}
    if targets:
        spec["targetModels"] = [{"name": name, "weight": weight} for name, weight in targets.items()]
    return {
        "apiVersion": f"{V1ALPHA2_POOL_GROUP}/v1alpha2",
        "kind": "InferenceModel",
        "metadata": {"name": name or model, "namespace": namespace},
        "spec": spec,
    }


def model_rewrite(
    name: str,
    pool: str,
    targets: Mapping[str, int],
    *,
    model: str | None = None,
    mode: PoolMode = "v1",
    namespace: str = "default",
    group: str = V1ALPHA2_POOL_GROUP,
) -> dict[str, Any]:
    """An InferenceModelRewrite of one rule: requests for ``model`` (any, when None) go to ``targets`` by weight."""
    rule: dict[str, Any] = {"targets": [{"modelRewrite": target, "weight": w} for target, w in targets.items()]}
    if model is not None:
        rule["matches"] = [{"model": {"type": "Exact", "value": model}}]
    return {
        "apiVersion": f"{group}/v1alpha2",
        "kind": "InferenceModelRewrite",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"poolRef": pool_ref(pool, mode), "rules": [rule]},
    }
