"""Builders for the Kubernetes JSON objects the kube tests feed in (GIE's ``wrappers.go``)."""

from __future__ import annotations

from typing import Any

from epp.kube.resources import V1_GROUP, V1ALPHA2_GROUP

Obj = dict[str, Any]


def _meta(name: str, namespace: str, **extra: Any) -> Obj:
    meta: Obj = {"name": name, "namespace": namespace}
    meta.update({k: v for k, v in extra.items() if v is not None})
    return meta


def pod(
    name: str,
    *,
    namespace: str = "default",
    ip: str | None = "10.0.0.1",
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    ready: bool = True,
    deleting: bool = False,
) -> Obj:
    status: Obj = {
        "phase": "Running",
        "conditions": [
            {"type": "PodScheduled", "status": "True"},
            {"type": "Ready", "status": "True" if ready else "False"},
        ],
    }
    if ip is not None:
        status["podIP"] = ip
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": _meta(
            name,
            namespace,
            labels=labels if labels is not None else {"app": "vllm"},
            annotations=annotations,
            deletionTimestamp="2026-01-01T00:00:00Z" if deleting else None,
        ),
        "spec": {"containers": [{"name": "server", "image": "vllm"}]},
        "status": status,
    }


def pool_v1(
    name: str = "pool",
    *,
    namespace: str = "default",
    match_labels: dict[str, str] | None = None,
    match_expressions: list[Obj] | None = None,
    ports: tuple[int, ...] = (8000,),
) -> Obj:
    selector: Obj = {"matchLabels": match_labels if match_labels is not None else {"app": "vllm"}}
    if match_expressions is not None:
        selector["matchExpressions"] = match_expressions
    return {
        "apiVersion": f"{V1_GROUP}/v1",
        "kind": "InferencePool",
        "metadata": _meta(name, namespace),
        "spec": {
            "selector": selector,
            "targetPorts": [{"number": p} for p in ports],
            "endpointPickerRef": {"kind": "Service", "name": "epp", "port": {"number": 9002}},
        },
    }


def pool_v1alpha2(
    name: str = "pool", *, namespace: str = "default", selector: dict[str, str] | None = None, port: int = 8000
) -> Obj:
    return {
        "apiVersion": f"{V1ALPHA2_GROUP}/v1alpha2",
        "kind": "InferencePool",
        "metadata": _meta(name, namespace),
        "spec": {
            "selector": selector if selector is not None else {"app": "vllm"},
            "targetPortNumber": port,
            "extensionRef": {"name": "epp"},
        },
    }


def _pool_ref(pool: str, group: str | None) -> Obj:
    ref: Obj = {"name": pool}
    if group is not None:
        ref["group"] = group
    return ref


def objective(
    name: str, *, pool: str = "pool", group: str | None = None, priority: int | None = None, namespace: str = "default"
) -> Obj:
    spec: Obj = {"poolRef": _pool_ref(pool, group)}
    if priority is not None:
        spec["priority"] = priority
    return {
        "apiVersion": f"{V1ALPHA2_GROUP}/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": _meta(name, namespace),
        "spec": spec,
    }


def rewrite(
    name: str,
    *,
    rules: list[Obj],
    pool: str = "pool",
    group: str | None = None,
    namespace: str = "default",
    created: str = "2026-01-01T00:00:00Z",
) -> Obj:
    return {
        "apiVersion": f"{V1ALPHA2_GROUP}/v1alpha2",
        "kind": "InferenceModelRewrite",
        "metadata": _meta(name, namespace, creationTimestamp=created),
        "spec": {"poolRef": _pool_ref(pool, group), "rules": rules},
    }


def rule(matches: list[str], targets: list[tuple[str, int | None]]) -> Obj:
    return {
        "matches": [{"model": {"type": "Exact", "value": m}} for m in matches],
        "targets": [{"modelRewrite": t, **({"weight": w} if w is not None else {})} for t, w in targets],
    }


def model(
    name: str,
    *,
    model_name: str,
    pool: str = "pool",
    criticality: str | None = None,
    targets: list[tuple[str, int | None]] | None = None,
    namespace: str = "default",
    created: str = "2026-01-01T00:00:00Z",
) -> Obj:
    spec: Obj = {"modelName": model_name, "poolRef": {"name": pool}}
    if criticality is not None:
        spec["criticality"] = criticality
    if targets is not None:
        spec["targetModels"] = [{"name": t, **({"weight": w} if w is not None else {})} for t, w in targets]
    return {
        "apiVersion": f"{V1ALPHA2_GROUP}/v1alpha2",
        "kind": "InferenceModel",
        "metadata": _meta(name, namespace, creationTimestamp=created),
        "spec": spec,
    }
