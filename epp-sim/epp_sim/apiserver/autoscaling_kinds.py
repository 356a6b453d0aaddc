"""Two more built-in kinds: ``autoscaling/v2`` HorizontalPodAutoscaler and core ``v1`` Event.

The HPA is what upstream WVA v0.9 declares variants on (annotated ``llm-d.ai/managed``) and what
KEDA creates for a ScaledObject; the fake cluster's HPA controller (:mod:`epp_sim.scalers.hpa`) acts on it.
Events are what the autoscaler records on its decisions. Their schemas cover the fields manifests,
kubectl and controllers use; the registry strategy's defaults and checks are in ``_prepare_hpa``
(``minReplicas`` defaults to 1; ``maxReplicas >= 1`` and ``>= minReplicas``; a scale target needs a
kind and a name; ``minReplicas: 0`` is refused unless an External or Object metric is set, as the
``HPAScaleToZero`` gate allows).
"""

from __future__ import annotations

from typing import Any

from epp_sim.apiserver.builtin_schemas import wrap
from epp_sim.apiserver.kinds import Column, Obj, ResourceType
from epp_sim.apiserver.schema import any_object, arr, integer, obj, string
from epp_sim.apiserver.timefmt import human_age, parse_time

__all__ = ["autoscaling_types"]

Cause = tuple[str, str, str]
_AGE = Column("Age", "string", description="CreationTimestamp")


def _metric_target() -> Obj:
    return obj(
        {
            "type": string(),
            "value": {"x-kubernetes-int-or-string": True},
            "averageValue": {"x-kubernetes-int-or-string": True},
            "averageUtilization": integer(),
        },
        required=("type",),
    )


def _metric_spec() -> Obj:
    identifier = obj({"name": string(), "selector": any_object()}, required=("name",))
    described = obj({"kind": string(), "name": string(), "apiVersion": string()}, required=("kind", "name"))
    return obj(
        {
            "type": string(),
            "external": obj({"metric": identifier, "target": _metric_target()}, required=("metric", "target")),
            "object": obj(
                {"describedObject": described, "metric": identifier, "target": _metric_target()},
                required=("describedObject", "metric", "target"),
            ),
            "pods": obj({"metric": identifier, "target": _metric_target()}, required=("metric", "target")),
            "resource": obj({"name": string(), "target": _metric_target()}, required=("name", "target")),
            "containerResource": any_object(),
        },
        required=("type",),
    )


def _rules() -> Obj:
    policy = obj(
        {"type": string(), "value": integer(), "periodSeconds": integer()}, required=("type", "value", "periodSeconds")
    )
    return obj(
        {
            "stabilizationWindowSeconds": integer(),
            "selectPolicy": string(),
            "policies": arr(policy, list_type="atomic"),
            "tolerance": {"x-kubernetes-int-or-string": True},
        }
    )


def _hpa_schema() -> Obj:
    spec = obj(
        {
            "scaleTargetRef": obj(
                {"kind": string(), "name": string(), "apiVersion": string()}, required=("kind", "name")
            ),
            "minReplicas": integer(),
            "maxReplicas": integer(),
            "metrics": arr(_metric_spec(), list_type="atomic"),
            "behavior": obj({"scaleUp": _rules(), "scaleDown": _rules()}),
        },
        required=("scaleTargetRef", "maxReplicas"),
    )
    condition = obj(
        {
            "type": string(),
            "status": string(),
            "reason": string(),
            "message": string(),
            "lastTransitionTime": string(format="date-time"),
        },
        required=("type", "status"),
    )
    status = obj(
        {
            "observedGeneration": integer(format="int64"),
            "lastScaleTime": string(format="date-time"),
            "currentReplicas": integer(),
            "desiredReplicas": integer(),
            "currentMetrics": arr(any_object(), list_type="atomic"),
            "conditions": arr(condition, merge_key="type"),
        }
    )
    return wrap(spec, status, spec_needed=True)


def _event_schema() -> Obj:
    ref = obj(
        {key: string() for key in ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")}
    )
    return wrap(
        None,
        None,
        involvedObject=ref,
        reason=string(),
        message=string(),
        type=string(),
        source=obj({"component": string(), "host": string()}),
        firstTimestamp=string(format="date-time"),
        lastTimestamp=string(format="date-time"),
        eventTime=string(format="date-time"),
        count=integer(),
        series=any_object(),
        action=string(),
        related=ref,
        reportingComponent=string(),
        reportingInstance=string(),
    )


def _prepare_hpa(new: Obj, old: Obj | None) -> list[Cause]:
    spec = new.setdefault("spec", {})
    spec.setdefault("minReplicas", 1)
    causes: list[Cause] = []
    low, high = spec.get("minReplicas"), spec.get("maxReplicas")
    if isinstance(high, int) and high < 1:
        causes.append(("spec.maxReplicas", "FieldValueInvalid", "Invalid value: must be greater than or equal to 1"))
    if isinstance(low, int) and isinstance(high, int) and low > high:
        causes.append(
            ("spec.minReplicas", "FieldValueInvalid", "Invalid value: must be less than or equal to maxReplicas")
        )
    scale_to_zero_ok = any(m.get("type") in ("External", "Object") for m in spec.get("metrics") or ())
    if low == 0 and not scale_to_zero_ok:
        causes.append(
            (
                "spec.minReplicas",
                "FieldValueInvalid",
                "Invalid value: 0: must be >= 1 without an External or Object metric",
            )
        )
    return causes


def _row_hpa(o: Obj, now: float) -> list[Any]:
    spec, status = o.get("spec") or {}, o.get("status") or {}
    ref = spec.get("scaleTargetRef") or {}
    current = status.get("currentMetrics") or []
    targets = ",".join(
        f"{(m.get('external') or {}).get('current', {}).get('averageValue', '<unknown>')}/"
        f"{(m.get('external') or {}).get('target', {}).get('averageValue') or '?'}"
        for m in current
    )
    created = parse_time(str((o.get("metadata") or {}).get("creationTimestamp", "")))
    return [
        f"{ref.get('kind')}/{ref.get('name')}",
        targets or "<unknown>",
        spec.get("minReplicas", 1),
        spec.get("maxReplicas"),
        status.get("currentReplicas") or 0,
        "<unknown>" if created is None else human_age(now - created),
    ]


def _row_event(o: Obj, now: float) -> list[Any]:
    ref = o.get("involvedObject") or {}
    return [
        o.get("type") or "",
        o.get("reason") or "",
        f"{str(ref.get('kind', '')).lower()}/{ref.get('name')}",
        o.get("message") or "",
    ]


def autoscaling_types() -> list[ResourceType]:
    """Fresh descriptions of HorizontalPodAutoscaler and Event."""
    return [
        ResourceType(
            "autoscaling",
            ("v2",),
            "HorizontalPodAutoscaler",
            "horizontalpodautoscalers",
            "horizontalpodautoscaler",
            True,
            {"v2": _hpa_schema()},
            short_names=("hpa",),
            categories=("all",),
            status_subresource=True,
            columns=(
                Column("Reference", "string"),
                Column("Targets", "string"),
                Column("MinPods", "integer"),
                Column("MaxPods", "integer"),
                Column("Replicas", "integer"),
                _AGE,
            ),
            row=_row_hpa,
            prepare=_prepare_hpa,
            openapi_name="io.k8s.api.autoscaling.v2.HorizontalPodAutoscaler",
        ),
        ResourceType(
            "",
            ("v1",),
            "Event",
            "events",
            "event",
            True,
            {"v1": _event_schema()},
            short_names=("ev",),
            columns=(
                Column("Type", "string"),
                Column("Reason", "string"),
                Column("Object", "string"),
                Column("Message", "string"),
            ),
            row=_row_event,
            tracks_generation=False,
            openapi_name="io.k8s.api.core.v1.Event",
        ),
    ]
