"""The Kubernetes kinds the picker reads: group, version, kind and plural, declared once.

Like kr8s's declared object classes, but as plain values: the informer builds its URLs from
them, discovery checks ``kind`` in ``group_version``, and tests create objects with them.

InferenceObjective and InferenceModelRewrite (v1alpha2) are served in two groups: the llm-d
router's ``llm-d.ai`` and GIE's ``inference.networking.x-k8s.io``, with the same schema. Which a
cluster serves is found by discovery (``manager.py``); :data:`OPTIONAL_KINDS` lists both, the
group that wins a name held in both first.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "INFERENCE_MODEL",
    "INFERENCE_MODEL_REWRITE",
    "INFERENCE_OBJECTIVE",
    "INFERENCE_POOL_V1",
    "INFERENCE_POOL_V1ALPHA2",
    "LLM_D_GROUP",
    "LLM_D_INFERENCE_MODEL_REWRITE",
    "LLM_D_INFERENCE_OBJECTIVE",
    "OPTIONAL_KINDS",
    "POD",
    "V1ALPHA2_GROUP",
    "V1_GROUP",
    "ResourceKind",
    "pool_kind",
]

V1_GROUP = "inference.networking.k8s.io"
V1ALPHA2_GROUP = "inference.networking.x-k8s.io"
LLM_D_GROUP = "llm-d.ai"


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

    @property
    def qualified(self) -> str:
        """``<Kind>.<group>`` (``<Kind>`` for core): tells the same kind of two groups apart."""
        return f"{self.kind}.{self.group}" if self.group else self.kind


POD = ResourceKind("", "v1", "Pod", "pods")
INFERENCE_POOL_V1 = ResourceKind(V1_GROUP, "v1", "InferencePool", "inferencepools")
INFERENCE_POOL_V1ALPHA2 = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferencePool", "inferencepools")
INFERENCE_MODEL = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferenceModel", "inferencemodels")
INFERENCE_OBJECTIVE = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferenceObjective", "inferenceobjectives")
INFERENCE_MODEL_REWRITE = ResourceKind(V1ALPHA2_GROUP, "v1alpha2", "InferenceModelRewrite", "inferencemodelrewrites")
LLM_D_INFERENCE_OBJECTIVE = ResourceKind(LLM_D_GROUP, "v1alpha2", "InferenceObjective", "inferenceobjectives")
LLM_D_INFERENCE_MODEL_REWRITE = ResourceKind(LLM_D_GROUP, "v1alpha2", "InferenceModelRewrite", "inferencemodelrewrites")

OPTIONAL_KINDS: dict[str, tuple[ResourceKind, ResourceKind]] = {
    "InferenceObjective": (LLM_D_INFERENCE_OBJECTIVE, INFERENCE_OBJECTIVE),
    "InferenceModelRewrite": (LLM_D_INFERENCE_MODEL_REWRITE, INFERENCE_MODEL_REWRITE),
}
"""Kind → its (winning, legacy) declarations: llm-d.ai, then inference.networking.x-k8s.io."""


def pool_kind(group: str) -> ResourceKind:
    """The InferencePool kind for ``--pool-group``."""
    if group == V1_GROUP:
        return INFERENCE_POOL_V1
    if group == V1ALPHA2_GROUP:
        return INFERENCE_POOL_V1ALPHA2
    raise ValueError(f"--pool-group: must be {V1_GROUP} or {V1ALPHA2_GROUP}, got {group!r}")
