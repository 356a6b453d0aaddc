"""The Kubernetes kinds the picker reads: group, version, kind and plural, declared once.

Like kr8s's declared object classes, but as plain values: the informer builds its URLs from
them, discovery checks ``kind`` in ``group_version``, and tests create objects with them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "INFERENCE_MODEL",
    "INFERENCE_MODEL_REWRITE",
    "INFERENCE_OBJECTIVE",
    "INFERENCE_POOL_V1",
    "INFERENCE_POOL_V1ALPHA2",
    "POD",
    "V1ALPHA2_GROUP",
    "V1_GROUP",
    "ResourceKind",
    "pool_kind",
]

V1_GROUP = "inference.networking.k8s.io"
V1ALPHA2_GROUP = "inference.networking.x-k8s.io"


@dataclass(frozen=True, slots=True)
class ResourceKind:
    """A namespaced resource type: where it is served and what it is called."""

    group: str  # "" for the core group
    version: str
    kind: str
    plural: str

    @property
    def group_version(self) -> str:
        """``v1`` for core, else ``<group>/<version>`` (the ``apiVersion`` of its objects)."""
        return f"{self.group}/{self.version}" if self.group else self.version


POD = ResourceKind("", "v1", "Pod", "pods")
INFERENCE_POOL_V1 = ResourceKind(V1_GROUP, "v1", "InferencePool", "inferencepools")
INFERENCE_POOL_V1ALPHA2 = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferencePool", "inferencepools")
INFERENCE_MODEL = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferenceModel", "inferencemodels")
INFERENCE_OBJECTIVE = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferenceObjective", "inferenceobjectives")
INFERENCE_MODEL_REWRITE = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferenceModelRewrite", "inferencemodelrewrites")


def pool_kind(group: str) -> ResourceKind:
    """The InferencePool kind for ``--pool-group``."""
    if group == V1_GROUP:
        return INFERENCE_POOL_V1
    if group == V1ALPHA2_GROUP:
        return INFERENCE_POOL_V1ALPHA2
    raise ValueError(f"--pool-group: must be {V1_GROUP} or {V1ALPHA2_GROUP}, got {group!r}")
