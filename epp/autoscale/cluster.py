"""What the controller reads from and writes to Kubernetes: a narrow protocol, and the pod view.

:class:`Cluster` is the I/O seam (kr8s behind it in :mod:`epp.autoscale.resources`; an in-memory
double in unit tests). Lists of kinds a cluster may not serve (the VariantAutoscaling CRD, KEDA's
ScaledObject, LeaderWorkerSet) return ``None`` when the kind is not installed, so a cluster
without them is a normal case, not a failing cycle. Everything is keyed by namespace.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from epp.autoscale.types import VariantKey

__all__ = ["Cluster", "Obj", "PodView", "controller_owner", "parse_pod"]

Obj = Mapping[str, Any]


class Cluster(Protocol):
    """The Kubernetes reads and writes of one autoscaler cycle."""

    async def list_variant_autoscalings(self) -> list[Obj] | None:
        """VariantAutoscalings (``llmd.ai/v1alpha1``); None when the CRD is not installed."""
        ...

    async def list_hpas(self) -> list[Obj]:
        """HorizontalPodAutoscalers (``autoscaling/v2``)."""
        ...

    async def list_scaled_objects(self) -> list[Obj] | None:
        """KEDA ScaledObjects (``keda.sh/v1alpha1``); None when KEDA is not installed."""
        ...

    async def list_deployments(self, namespace: str) -> list[Obj]: ...

    async def list_leaderworkersets(self, namespace: str) -> list[Obj]:
        """LeaderWorkerSets; empty when the CRD is not installed."""
        ...

    async def list_replicasets(self, namespace: str) -> list[Obj]: ...

    async def list_pods(self, namespace: str) -> list[Obj]: ...

    async def get_configmap(self, namespace: str, name: str) -> Obj | None:
        """The ConfigMap, or ``None`` if it does not exist."""
        ...

    async def patch_variant_status(self, key: VariantKey, status: Mapping[str, Any]) -> None:
        """Merge-patch the VariantAutoscaling's ``status`` subresource."""
        ...

    async def scale(self, namespace: str, kind: str, name: str, replicas: int) -> None:
        """Set ``spec.replicas`` of a Deployment or LeaderWorkerSet through its ``scale`` subresource."""
        ...

    async def create_event(self, namespace: str, event: Mapping[str, Any]) -> None:
        """POST a ``v1`` Event."""
        ...

    async def patch_event(self, namespace: str, name: str, patch: Mapping[str, Any]) -> None:
        """Merge-patch a ``v1`` Event (the count of a repeated one)."""
        ...


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


def controller_owner(meta: Obj) -> tuple[str, str, str] | None:
    """The controlling owner reference: ``(kind, name, uid)``."""
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
        owner=controller_owner(meta),
        ip=str(status.get("podIP") or ""),
        ready=bool(ready),
        metrics_port=int(port) if port else None,
    )
