"""Where variants come from: annotated HPAs and KEDA ScaledObjects (WVA v0.9), or a VariantAutoscaling.

Upstream removed the VariantAutoscaling CRD (#1390): a variant is the ``autoscaling/v2``
HorizontalPodAutoscaler or ``keda.sh/v1alpha1`` ScaledObject that scales it, annotated
``llm-d.ai/managed: "true"``, ``llm-d.ai/model-id`` (required) and ``llm-d.ai/variant-cost``
(optional, a non-negative number, default ``10.0``; #1123). Its name is the scaler's name (the
``variant_name`` of the ``wva_*`` series), its bounds are the scaler's (HPA ``minReplicas``,
default 1, and ``maxReplicas``; ScaledObject ``minReplicaCount``, default 0, and
``maxReplicaCount``, default 100), and its target is the scaler's ``scaleTargetRef`` (kind
Deployment by default, or LeaderWorkerSet).

A VariantAutoscaling (``llmd.ai/v1alpha1``, our CRD with ``minReplicas`` / ``maxReplicas``) is
still accepted for those who have it, and keeps its status. When several declare the same target,
a ScaledObject wins over an HPA (upstream: KEDA's own HPA inherits the ScaledObject's
annotations), and either wins over a VariantAutoscaling (the migration path: annotate, then delete
the VA). With ``--controller-instance`` only objects labelled
``wva.llmd.ai/controller-instance=<id>`` count.
"""

from __future__ import annotations

import enum
import logging
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epp.autoscale.cluster import Obj
from epp.autoscale.scaletargets import DEPLOYMENT, LWS
from epp.autoscale.types import ModelKey, VariantKey

__all__ = [
    "CONTROLLER_INSTANCE_LABEL",
    "DEFAULT_VARIANT_COST",
    "MANAGED",
    "MODEL_ID",
    "VARIANT_COST",
    "Discovery",
    "Source",
    "VariantError",
    "VariantSpec",
    "discover",
    "parse_variant",
]

log = logging.getLogger(__name__)

MANAGED = "llm-d.ai/managed"
MODEL_ID = "llm-d.ai/model-id"
VARIANT_COST = "llm-d.ai/variant-cost"
CONTROLLER_INSTANCE_LABEL = "wva.llmd.ai/controller-instance"
DEFAULT_VARIANT_COST = 10.0
_KEDA_DEFAULT_MAX = 100
_VA_COST_RE = re.compile(r"^\d+(\.\d+)?$")


class Source(enum.Enum):
    """The kind that declares a variant; ``value`` is the kind name."""

    HPA = "HorizontalPodAutoscaler"
    SCALED_OBJECT = "ScaledObject"
    VA = "VariantAutoscaling"

    @property
    def api_version(self) -> str:
        return {"HPA": "autoscaling/v2", "SCALED_OBJECT": "keda.sh/v1alpha1", "VA": "llmd.ai/v1alpha1"}[self.name]


class VariantError(ValueError):
    """A declaration that cannot be used; the message names the object, field and value."""


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """One variant: the model it serves, what it scales, its cost and bounds, and its previous decision."""

    key: VariantKey
    source: Source
    model_id: str
    target_kind: str
    target: str
    cost: float = DEFAULT_VARIANT_COST
    min_replicas: int = 1
    max_replicas: int | None = None
    uid: str = ""
    labels: Mapping[str, str] = field(default_factory=dict)
    previous_target: int = 0
    previous_accelerator: str = ""
    conditions: tuple[Obj, ...] = ()

    @property
    def model(self) -> ModelKey:
        return ModelKey(self.key.namespace, self.model_id)


def _key(obj: Obj) -> VariantKey:
    meta = obj.get("metadata") or {}
    return VariantKey(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))


def _target(where: str, ref: Any) -> tuple[str, str]:
    ref = ref if isinstance(ref, Mapping) else {}
    kind = str(ref.get("kind") or DEPLOYMENT)
    if kind not in (DEPLOYMENT, LWS):
        raise VariantError(f"{where}: scaleTargetRef.kind={kind!r}: only Deployment and LeaderWorkerSet are supported")
    if not ref.get("name"):
        raise VariantError(f"{where}: scaleTargetRef.name is required")
    return kind, str(ref["name"])


def _int_field(where: str, spec: Obj, name: str, default: int | None) -> int | None:
    value = spec.get(name, default)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise VariantError(f"{where}: spec.{name}={value!r}: must be an integer >= 0")
    return value


def _annotated(source: Source, obj: Obj) -> VariantSpec:
    """A variant from an annotated HPA or ScaledObject (upstream's ``annotations.Parse`` rules)."""
    key = _key(obj)
    where = f"{source.value} {key}"
    meta = obj.get("metadata") or {}
    ann = meta.get("annotations") or {}
    model = str(ann.get(MODEL_ID) or "")
    if not model:
        raise VariantError(f"{where}: annotation {MODEL_ID} is required")
    cost_text = str(ann.get(VARIANT_COST) or DEFAULT_VARIANT_COST)
    try:
        cost = float(cost_text)
    except ValueError:
        raise VariantError(f"{where}: annotation {VARIANT_COST}={cost_text!r}: must be a number") from None
    if not math.isfinite(cost) or cost < 0:
        raise VariantError(f"{where}: annotation {VARIANT_COST}={cost_text!r}: must be a non-negative number")
    spec = obj.get("spec") or {}
    kind, name = _target(where, spec.get("scaleTargetRef"))
    if source is Source.HPA:
        low, high = _int_field(where, spec, "minReplicas", 1), _int_field(where, spec, "maxReplicas", None)
    else:
        low = _int_field(where, spec, "minReplicaCount", 0)
        high = _int_field(where, spec, "maxReplicaCount", _KEDA_DEFAULT_MAX)
    assert low is not None
    if high is not None and high < max(1, low):
        raise VariantError(f"{where}: maximum replicas {high} is below the minimum {max(1, low)}")
    return VariantSpec(
        key=key,
        source=source,
        model_id=model,
        target_kind=kind,
        target=name,
        cost=cost,
        min_replicas=low,
        max_replicas=high,
        uid=str(meta.get("uid") or ""),
        labels=dict(meta.get("labels") or {}),
    )


def parse_variant(obj: Obj) -> VariantSpec:
    """Validate a VariantAutoscaling as the CRD schema would, plus our min/max extension."""
    key = _key(obj)
    where = f"VariantAutoscaling {key}"
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    kind, name = _target(where, spec.get("scaleTargetRef"))
    model_id = spec.get("modelID")
    if not isinstance(model_id, str) or not model_id:
        raise VariantError(f"{where}: spec.modelID={model_id!r}: a non-empty string is required")
    cost_text = str(spec.get("variantCost", DEFAULT_VARIANT_COST))
    cost = float(cost_text) if _VA_COST_RE.match(cost_text) else DEFAULT_VARIANT_COST  # upstream fallback
    low = _int_field(where, spec, "minReplicas", 1)
    high = _int_field(where, spec, "maxReplicas", None)
    assert low is not None
    if high is not None and (high < 1 or high < low):
        raise VariantError(f"{where}: spec.maxReplicas={high}: must be >= 1 and >= minReplicas ({low})")
    status = obj.get("status") or {}
    alloc = status.get("desiredOptimizedAlloc") or {}
    previous = alloc.get("numReplicas", 0)
    return VariantSpec(
        key=key,
        source=Source.VA,
        model_id=model_id,
        target_kind=kind,
        target=name,
        cost=cost,
        min_replicas=low,
        max_replicas=high,
        uid=str(meta.get("uid") or ""),
        labels=dict(meta.get("labels") or {}),
        previous_target=previous if isinstance(previous, int) and previous >= 0 else 0,
        previous_accelerator=str(alloc.get("accelerator") or ""),
        conditions=tuple(c for c in status.get("conditions") or () if isinstance(c, Mapping)),
    )


@dataclass(frozen=True, slots=True)
class Discovery:
    """This cycle's variants, and the declarations that could not be used (with why)."""

    variants: tuple[VariantSpec, ...] = ()
    invalid: tuple[tuple[Source, VariantKey, Obj, str], ...] = ()


def _wanted(obj: Obj, namespace: str, instance: str) -> bool:
    meta = obj.get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False
    if namespace and (meta.get("namespace") or "default") != namespace:
        return False
    return not instance or (meta.get("labels") or {}).get(CONTROLLER_INSTANCE_LABEL) == instance


def discover(
    *,
    hpas: Sequence[Obj],
    scaled_objects: Sequence[Obj] | None,
    variant_autoscalings: Sequence[Obj] | None,
    namespace: str = "",
    controller_instance: str = "",
) -> Discovery:
    """Every variant, deduplicated by target: ScaledObject over HPA over VariantAutoscaling."""
    by_target: dict[tuple[str, str, str], VariantSpec] = {}
    invalid: list[tuple[Source, VariantKey, Obj, str]] = []
    ordered = (
        (Source.VA, variant_autoscalings or ()),
        (Source.HPA, hpas),
        (Source.SCALED_OBJECT, scaled_objects or ()),
    )
    for source, objs in ordered:
        for obj in objs:
            if not _wanted(obj, namespace, controller_instance):
                continue
            annotations = (obj.get("metadata") or {}).get("annotations") or {}
            if source is not Source.VA and annotations.get(MANAGED) != "true":
                continue
            try:
                v = parse_variant(obj) if source is Source.VA else _annotated(source, obj)
            except VariantError as e:
                invalid.append((source, _key(obj), obj, str(e)))
                continue
            target = (v.key.namespace, v.target_kind, v.target)
            replaced = by_target.get(target)
            if replaced is not None and replaced.source is not source:
                log.info(
                    "variant declared twice; the later kind wins",
                    extra={"target": "/".join(target), "kept": f"{source.value} {v.key}", "dropped": str(replaced.key)},
                )
            by_target[target] = v
    return Discovery(tuple(sorted(by_target.values(), key=lambda v: v.key)), tuple(invalid))
