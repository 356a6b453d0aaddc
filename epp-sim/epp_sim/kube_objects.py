"""The Kubernetes objects simulated pods and pools are made of: one definition of each.

A simulated pod is a Pod whose status says what a kubelet would say once its container runs:
``Running``, its own ``podIP`` (the simulator's loopback address) and the ``Ready`` condition.
The local stack, the hermetic harness, the benchmarks and the simulated workload controller all
build pods here, so "Ready" means the same thing everywhere. Pure functions returning plain dicts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

__all__ = [
    "V1ALPHA2_POOL_GROUP",
    "V1_POOL_GROUP",
    "PoolMode",
    "inference_pool",
    "pod",
    "pod_status_loading",
    "pod_status_ready",
]

V1_POOL_GROUP = "inference.networking.k8s.io"
V1ALPHA2_POOL_GROUP = "inference.networking.x-k8s.io"
PoolMode = Literal["v1", "v1alpha2", "standalone"]

_CONTAINER = "vllm"
_IMAGE = "epp-sim/vllm"
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


def pod_status_loading() -> dict[str, Any]:
    """Scheduled, container still starting (the model is loading): not Ready, no IP yet."""
    return {
        "phase": "Pending",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "False", "reason": "ContainersNotReady"},
        ],
    }


def pod_status_ready(ip: str, *, containers: Sequence[str] = (_CONTAINER,), ready: bool = True) -> dict[str, Any]:
    """Running at ``ip``; ``ready=False`` is a running pod that fails its readiness probe."""
    flag = "True" if ready else "False"
    return {
        "phase": "Running",
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "hostIP": "127.0.0.1",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "ContainersReady", "status": flag},
            {"type": "Ready", "status": flag},
        ],
        "containerStatuses": [
            {"name": name, "ready": ready, "restartCount": 0, "state": {"running": {}}} for name in containers
        ],
    }


def inference_pool(
    mode: PoolMode, name: str, labels: Mapping[str, str], port: int, *, namespace: str = "default"
) -> dict[str, Any]:
    """The InferencePool of ``mode`` (v1 or v1alpha2) selecting ``labels`` on ``port``."""
    meta = {"name": name, "namespace": namespace}
    if mode == "v1alpha2":
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
                "targetPorts": [{"number": port}],
                "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
            },
        }
    raise ValueError(f"no InferencePool in {mode!r} mode (standalone selects pods by label)")
