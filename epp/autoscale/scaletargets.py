"""What a variant scales: a Deployment or a LeaderWorkerSet, read into one view, and the pods that serve it.

A replica of a Deployment is a pod; a replica of a LeaderWorkerSet (``leaderworkerset.x-k8s.io/v1``,
upstream #910) is a group of ``leaderWorkerTemplate.size`` pods whose leader (worker index 0)
serves and reports metrics for the whole group. Either way the counts come from the object's
``spec.replicas`` and ``status.replicas`` / ``status.readyReplicas`` and scaling goes through its
``scale`` subresource.

From the (leader) pod template: GPUs per replica (``nvidia.com/gpu``, ``amd.com/gpu``,
``habana.ai/gaudi``, ``gpu.intel.com/i915``, ``gpu.intel.com/xe`` requests; for a group the
leader's plus ``size − 1`` workers'; 1 if none), the P/D role (label ``llm-d.ai/role``:
``prefill``, ``decode``, else ``both``), the engine and its arguments, and the accelerator
(upstream #882, #1026): the first GPU product label in the template's ``nodeSelector``, else in a
required, then preferred, node-affinity ``In`` term, else the declaring object's
``inference.optimization/acceleratorName`` label, else ``unknown``.

Pods map to targets within their namespace only: a Deployment's through their controlling
ReplicaSet (uid-checked), or its selector for a pod without owners; a LeaderWorkerSet's through
the ``leaderworkerset.sigs.k8s.io/name`` label, leaders only. Targets being deleted own nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epp.autoscale.cluster import Obj, PodView, controller_owner
from epp.autoscale.engine_args import EngineParams, engine_params
from epp.autoscale.types import ROLE_BOTH, ROLE_DECODE, ROLE_PREFILL
from epp.labels import Selector, SelectorError, selector_from_object
from epp.quantities import parse_quantity

__all__ = [
    "ACCELERATOR_LABEL",
    "DEPLOYMENT",
    "GPU_RESOURCES",
    "LWS",
    "LWS_GROUP_VERSION",
    "LWS_NAME_LABEL",
    "LWS_WORKER_INDEX_LABEL",
    "PRODUCT_LABELS",
    "ROLE_LABEL",
    "UNKNOWN_ACCELERATOR",
    "ScaleTargetView",
    "accelerator_of",
    "map_pods",
    "parse_scale_target",
]

DEPLOYMENT = "Deployment"
LWS = "LeaderWorkerSet"
LWS_GROUP_VERSION = "leaderworkerset.x-k8s.io/v1"
LWS_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
LWS_WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
ROLE_LABEL = "llm-d.ai/role"
ACCELERATOR_LABEL = "inference.optimization/acceleratorName"
UNKNOWN_ACCELERATOR = "unknown"
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "habana.ai/gaudi", "gpu.intel.com/i915", "gpu.intel.com/xe")
PRODUCT_LABELS = tuple(
    sorted(
        (
            "nvidia.com/gpu.product",
            "cloud.google.com/gke-accelerator",
            "amd.com/gpu.product-name",
            "habana.ai/product.name",
            "gpu.intel.com/product",
        )
    )
)


@dataclass(frozen=True, slots=True)
class ScaleTargetView:
    """A Deployment or LeaderWorkerSet as the autoscaler reads it."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    spec_replicas: int = 1
    status_replicas: int = 0
    ready_replicas: int = 0
    selector: Selector | None = None
    deleting: bool = False
    template: Obj = field(default_factory=dict)
    """The pod template that serves: the Deployment's, or the LeaderWorkerSet's leader template."""
    gpus_per_replica: int = 1
    group_size: int = 1
    role: str = ROLE_BOTH
    params: EngineParams = field(default_factory=EngineParams)

    @property
    def engine(self) -> str:
        return self.params.engine


def _gpus(template: Mapping[str, Any]) -> int:
    total = 0
    for c in (template.get("spec") or {}).get("containers") or ():
        requests = (c.get("resources") or {}).get("requests") or {}
        for resource in GPU_RESOURCES:
            if resource in requests:
                try:
                    total += parse_quantity(str(requests[resource]))
                except ValueError:
                    continue
    return total


def _role(template: Mapping[str, Any]) -> str:
    value = ((template.get("metadata") or {}).get("labels") or {}).get(ROLE_LABEL)
    return value if value in (ROLE_PREFILL, ROLE_DECODE) else ROLE_BOTH


def _affinity_product(term: Mapping[str, Any]) -> str:
    for expr in term.get("matchExpressions") or ():
        if expr.get("key") in PRODUCT_LABELS and expr.get("operator") == "In" and expr.get("values"):
            return str(expr["values"][0])
    return ""


def accelerator_of(template: Mapping[str, Any], declared_labels: Mapping[str, str]) -> str:
    """The accelerator a template asks for (nodeSelector, node affinity), else the label, else ``unknown``."""
    spec = template.get("spec") or {}
    selector = spec.get("nodeSelector") or {}
    for key in PRODUCT_LABELS:
        if selector.get(key):
            return str(selector[key])
    node = (spec.get("affinity") or {}).get("nodeAffinity") or {}
    required = (node.get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or ()
    preferred = [p.get("preference") or {} for p in node.get("preferredDuringSchedulingIgnoredDuringExecution") or ()]
    for term in [*required, *preferred]:
        if product := _affinity_product(term):
            return product
    return str(declared_labels.get(ACCELERATOR_LABEL) or UNKNOWN_ACCELERATOR)


def parse_scale_target(kind: str, obj: Obj) -> ScaleTargetView:
    """Read a Deployment or LeaderWorkerSet (``kind``) into a :class:`ScaleTargetView`."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    size = 1
    if kind == LWS:
        lwt = spec.get("leaderWorkerTemplate") or {}
        size = max(1, int(lwt.get("size") or 1))
        worker = lwt.get("workerTemplate") or {}
        template = lwt.get("leaderTemplate") or worker
        gpus = _gpus(lwt.get("leaderTemplate") or {}) + (size - 1) * _gpus(worker)
        selector: Selector | None = None
    else:
        template = spec.get("template") or {}
        gpus = _gpus(template)
        try:
            selector = selector_from_object(spec.get("selector") or {})
        except SelectorError:
            selector = None
    replicas = spec.get("replicas")
    return ScaleTargetView(
        kind=kind,
        namespace=str(meta.get("namespace") or "default"),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        spec_replicas=1 if replicas is None else int(replicas),  # Kubernetes defaults a nil to 1
        status_replicas=int(status.get("replicas") or 0),
        ready_replicas=int(status.get("readyReplicas") or 0),
        selector=selector,
        deleting=bool(meta.get("deletionTimestamp")),
        template=template,
        gpus_per_replica=gpus or 1,
        group_size=size,
        role=_role(template),
        params=engine_params(template),
    )


def _deployment_pods(
    deployments: Sequence[ScaleTargetView], replicasets: Sequence[Obj], pods: Sequence[PodView]
) -> dict[tuple[str, str], list[PodView]]:
    live = {d.name: d for d in deployments if not d.deleting}
    rs_owner: dict[str, str] = {}
    for rs in replicasets:
        meta = rs.get("metadata") or {}
        owner = controller_owner(meta)
        if owner is None or owner[0] != DEPLOYMENT:
            continue
        dep = live.get(owner[1])
        if dep is not None and (not owner[2] or not dep.uid or owner[2] == dep.uid):
            rs_owner[str(meta.get("name"))] = dep.name
    out: dict[tuple[str, str], list[PodView]] = {}
    for pod in pods:
        if pod.labels.get(LWS_NAME_LABEL):
            continue
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
            out.setdefault((DEPLOYMENT, name), []).append(pod)
    return out


def map_pods(
    targets: Sequence[ScaleTargetView], replicasets: Sequence[Obj], pods: Sequence[PodView]
) -> dict[tuple[str, str], list[PodView]]:
    """The serving pods of one namespace by ``(kind, target name)``; pods of anything else are dropped."""
    out = _deployment_pods([t for t in targets if t.kind == DEPLOYMENT], replicasets, pods)
    groups = {t.name for t in targets if t.kind == LWS and not t.deleting}
    for pod in pods:
        name = pod.labels.get(LWS_NAME_LABEL)
        if name in groups and pod.labels.get(LWS_WORKER_INDEX_LABEL, "0") == "0":
            out.setdefault((LWS, str(name)), []).append(pod)
    return out
