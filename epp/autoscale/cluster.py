"""What the controller reads from and writes to Kubernetes: a narrow protocol and the parsing.

:class:`Cluster` is the I/O seam (kr8s behind it in :mod:`epp.autoscale.resources`; an in-memory
double in tests). This module turns its raw objects into typed views: VariantAutoscaling specs
(validated, with a clear error for a bad one), Deployment replica counts, and the pod → Deployment
mapping (pod → controlling ReplicaSet → controlling Deployment, or the Deployment's selector for a
pod without owners). Everything is keyed by namespace: a same-named Deployment in another
namespace never matches.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from epp.autoscale.types import ModelKey, VariantKey
from epp.labels import Selector, SelectorError, selector_from_object

__all__ = [
    "ACCELERATOR_LABEL",
    "DEFAULT_VARIANT_COST",
    "Cluster",
    "DeploymentView",
    "PodView",
    "VariantError",
    "VariantSpec",
    "map_pods",
    "parse_deployment",
    "parse_pod",
    "parse_variant",
]

ACCELERATOR_LABEL = "inference.optimization/acceleratorName"
DEFAULT_VARIANT_COST = 10.0
_COST_RE = re.compile(r"^\d+(\.\d+)?$")

Obj = Mapping[str, Any]


class Cluster(Protocol):
    """The Kubernetes reads and writes of one autoscaler cycle."""

    async def list_variant_autoscalings(self) -> list[Obj]: ...

    async def list_deployments(self, namespace: str) -> list[Obj]: ...

    async def list_replicasets(self, namespace: str) -> list[Obj]: ...

    async def list_pods(self, namespace: str) -> list[Obj]: ...

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        """The ConfigMap, or ``None`` if it does not exist."""
        ...

    async def patch_variant_status(self, key: VariantKey, status: Mapping[str, Any]) -> None:
        """Merge-patch the VariantAutoscaling's ``status`` subresource."""
        ...

    async def scale_deployment(self, namespace: str, name: str, replicas: int) -> None:
        """Set ``spec.replicas`` through the Deployment's ``scale`` subresource."""
        ...


class VariantError(ValueError):
    """A VariantAutoscaling that cannot be used; the message names the field and value."""


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """A validated VariantAutoscaling (``llmd.ai/v1alpha1``) and its previous decision."""

    key: VariantKey
    model_id: str
    deployment: str
    accelerator: str
    cost: float
    min_replicas: int
    max_replicas: int | None
    previous_target: int
    previous_accelerator: str
    conditions: tuple[Obj, ...]

    @property
    def model(self) -> ModelKey:
        return ModelKey(self.key.namespace, self.model_id)


def _int_field(spec: Obj, name: str, default: int | None, where: str) -> int | None:
    value = spec.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise VariantError(f"{where}: spec.{name}={value!r}: must be an integer >= 0")
    return value


def parse_variant(obj: Obj) -> VariantSpec:
    """Validate a VariantAutoscaling as the CRD schema would, plus our min/max extension."""
    meta = obj.get("metadata") or {}
    key = VariantKey(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
    where = f"VariantAutoscaling {key}"
    spec = obj.get("spec") or {}
    ref = spec.get("scaleTargetRef") or {}
    if ref.get("kind") != "Deployment":
        raise VariantError(f"{where}: spec.scaleTargetRef.kind={ref.get('kind')!r}: only Deployment is supported")
    if not ref.get("name"):
        raise VariantError(f"{where}: spec.scaleTargetRef.name is required")
    model_id = spec.get("modelID")
    if not isinstance(model_id, str) or not model_id:
        raise VariantError(f"{where}: spec.modelID={model_id!r}: a non-empty string is required")
    cost_text = str(spec.get("variantCost", DEFAULT_VARIANT_COST))
    cost = float(cost_text) if _COST_RE.match(cost_text) else DEFAULT_VARIANT_COST  # upstream fallback
    min_replicas = _int_field(spec, "minReplicas", 1, where)
    max_replicas = _int_field(spec, "maxReplicas", None, where)
    assert min_replicas is not None
    if max_replicas is not None and (max_replicas < 1 or max_replicas < min_replicas):
        raise VariantError(
            f"{where}: spec.maxReplicas={max_replicas}: must be >= 1 and >= minReplicas ({min_replicas})"
        )
    labels = meta.get("labels") or {}
    status = obj.get("status") or {}
    alloc = status.get("desiredOptimizedAlloc") or {}
    previous = alloc.get("numReplicas", 0)
    return VariantSpec(
        key=key,
        model_id=model_id,
        deployment=str(ref["name"]),
        accelerator=str(labels.get(ACCELERATOR_LABEL, "")),
        cost=cost,
        min_replicas=min_replicas,
        max_replicas=max_replicas,
        previous_target=previous if isinstance(previous, int) and previous >= 0 else 0,
        previous_accelerator=str(alloc.get("accelerator") or ""),
        conditions=tuple(c for c in status.get("conditions") or () if isinstance(c, Mapping)),
    )


@dataclass(frozen=True, slots=True)
class DeploymentView:
    """The parts of a Deployment the autoscaler reads."""

    namespace: str
    name: str
    uid: str
    spec_replicas: int
    status_replicas: int
    ready_replicas: int
    selector: Selector | None
    deleting: bool


def parse_deployment(obj: Obj) -> DeploymentView:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    try:
        selector: Selector | None = selector_from_object(spec.get("selector") or {})
    except SelectorError:
        selector = None
    replicas = spec.get("replicas")
    return DeploymentView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        spec_replicas=1 if replicas is None else int(replicas),  # Kubernetes defaults a nil to 1
        status_replicas=int(status.get("replicas") or 0),
        ready_replicas=int(status.get("readyReplicas") or 0),
        selector=selector,
        deleting=bool(meta.get("deletionTimestamp")),
    )


@dataclass(frozen=True, slots=True)
class PodView:
    """A pod as the autoscaler sees it: where to scrape it, and whether it serves traffic."""

    namespace: str
    name: str
    labels: Mapping[str, str]
    owner: tuple[str, str, str] | None  # controlling owner: (kind, name, uid)
    ip: str
    ready: bool
    metrics_port: int | None  # container port named "metrics", else the first declared port


def _controller_owner(meta: Obj) -> tuple[str, str, str] | None:
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return str(ref.get("kind")), str(ref.get("name")), str(ref.get("uid") or "")
    return None


def parse_pod(obj: Obj) -> PodView:
    meta = obj.get("metadata") or {}
    status = obj.get("status") or {}
    ready = not meta.get("deletionTimestamp") and any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    ports = [p for c in (obj.get("spec") or {}).get("containers") or () for p in c.get("ports") or ()]
    named = [p for p in ports if p.get("name") == "metrics"]
    port = (named or ports or [{}])[0].get("containerPort")
    return PodView(
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        labels=dict(meta.get("labels") or {}),
        owner=_controller_owner(meta),
        ip=str(status.get("podIP") or ""),
        ready=bool(ready),
        metrics_port=int(port) if port else None,
    )


def map_pods(
    deployments: Sequence[DeploymentView], replicasets: Sequence[Obj], pods: Sequence[PodView]
) -> dict[str, list[PodView]]:
    """Pods of one namespace grouped by owning Deployment name; pods of anything else are dropped.

    A pod owned by a ReplicaSet belongs to that ReplicaSet's controlling Deployment (matched by
    name and, when both carry one, uid). A pod with no controlling owner falls back to the first
    Deployment (by name) whose selector matches its labels. Deployments being deleted own nothing.
    """
    live = {d.name: d for d in deployments if not d.deleting}
    rs_owner: dict[str, str] = {}
    for rs in replicasets:
        meta = rs.get("metadata") or {}
        owner = _controller_owner(meta)
        if owner is None or owner[0] != "Deployment":
            continue
        dep = live.get(owner[1])
        if dep is not None and (not owner[2] or not dep.uid or owner[2] == dep.uid):
            rs_owner[str(meta.get("name"))] = dep.name
    by_dep: dict[str, list[PodView]] = {}
    for pod in pods:
        if pod.owner is not None:
            name = rs_owner.get(pod.owner[1]) if pod.owner[0] == "ReplicaSet" else None
        else:
            name = next(
                (
                    d.name
                    for d in sorted(live.values(), key=lambda d: d.name)
                    if d.selector and not d.selector.empty and d.selector.matches(pod.labels)
                ),
                None,
            )
        if name is not None:
            by_dep.setdefault(name, []).append(pod)
    return by_dep
