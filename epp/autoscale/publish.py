"""A decision's outputs: the ``wva_*`` series, Kubernetes Events, direct scaling, and the VA's status.

The gauge is the actuation (upstream: KEDA or an HPA reads ``wva_desired_replicas``). Direct
scaling through the workload's ``scale`` subresource happens for scale-from-zero (as upstream) and,
with ``--actuate``, for every decision that moves a target (ours; upstream #421 asks for it), never
for one that holds (pending, cooldown, steady, no-metrics), so a cycle never undoes a change that
is still rolling out. A variant declared by a VariantAutoscaling also gets its status:
``desiredOptimizedAlloc{numReplicas, accelerator, lastRunTime, reason}`` (only with a resolved
accelerator: the CRD requires one), ``actuation.applied`` and the ``TargetResolved``,
``MetricsAvailable`` and ``OptimizationReady`` conditions, whose ``lastTransitionTime`` moves only
when their status changes.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epp.autoscale import events
from epp.autoscale.cluster import Cluster
from epp.autoscale.decision import Decision, Reason
from epp.autoscale.events import EventRecorder
from epp.autoscale.metrics import UNRESOLVED, AutoscalerMetrics
from epp.autoscale.scaletargets import ACCELERATOR_LABEL, UNKNOWN_ACCELERATOR
from epp.autoscale.types import VariantKey
from epp.autoscale.variants import Source, VariantSpec
from epp.kube.client import KubeError

__all__ = ["ACTUATING", "Publisher", "condition"]

log = logging.getLogger(__name__)

ACTUATING = frozenset(
    {Reason.SATURATED, Reason.TIMEOUT, Reason.SCALE_DOWN, Reason.LIMIT, Reason.QUOTA, Reason.IDLE, Reason.WAKE}
)
_NO_METRICS = (Reason.NO_METRICS, Reason.INACTIVE)


def rfc3339(wall: float) -> str:
    return dt.datetime.fromtimestamp(int(wall), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def condition(
    previous: Sequence[Mapping[str, Any]], kind: str, ok: bool, reason: str, message: str, wall: float
) -> dict[str, Any]:
    """A condition whose ``lastTransitionTime`` moves only when its status changes."""
    status = "True" if ok else "False"
    old = next((c for c in previous if c.get("type") == kind), None)
    since = old.get("lastTransitionTime") if old is not None and old.get("status") == status else None
    return {
        "type": kind,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": since or rfc3339(wall),
    }


@dataclass(frozen=True, slots=True)
class Published:
    """What publishing did: whether the workload was scaled, and what failed."""

    actuated: bool = False
    error: str = ""


class Publisher:
    """Writes every output of one decision; one failed write never stops the others."""

    def __init__(self, cluster: Cluster, metrics: AutoscalerMetrics, recorder: EventRecorder, *, actuate: bool) -> None:
        self._cluster = cluster
        self._metrics = metrics
        self._events = recorder
        self._actuate = actuate

    async def publish(
        self, v: VariantSpec, d: Decision, *, kind: str, spec_replicas: int | None, accelerator: str, wall: float,
        input_error: str = "",
    ) -> Published:  # fmt: skip
        error = ""
        actuated = False
        direct = self._actuate or d.reason is Reason.WAKE  # WVA scales from zero directly, always
        if direct and spec_replicas is not None and d.reason in ACTUATING and d.target != spec_replicas:
            try:
                await self._cluster.scale(v.key.namespace, kind, v.target, d.target)
                actuated = True
            except KubeError as e:  # the next cycle retries
                log.error("scaling failed", extra={"variant": str(v.key), "target": d.target, "error": str(e)})
                error = f"scaling to {d.target} failed: {e}"
        resolved = accelerator not in ("", UNKNOWN_ACCELERATOR)
        self._metrics.publish(
            v.key, accelerator=accelerator if resolved else UNRESOLVED, desired=d.target, current=d.current
        )
        fresh = d.reason not in _NO_METRICS and d.signals is not None
        self._metrics.saturation(
            v.key, v.model_id, accelerator if resolved else UNRESOLVED, d.signals if fresh else None
        )
        if d.target != d.current:
            self._metrics.count(v.key, direction="up" if d.target > d.current else "down", reason=d.reason.value)
        if d.limited_by:
            self._metrics.limited_by(v.key, d.limited_by)
        await self._record_events(v, d, resolved, input_error)
        log.info(
            "autoscaler decision",
            extra={
                "variant": str(v.key),
                "current": d.current,
                "target": d.target,
                "reason": d.reason.value,
                "detail": d.message,
            },
        )
        if v.source is Source.VA:
            status = self._status(v, d, wall, accelerator=accelerator if resolved else "", actuated=actuated)
            try:
                await self._cluster.patch_variant_status(v.key, status)
            except KubeError as e:
                log.error("status update failed", extra={"variant": str(v.key), "error": str(e)})
                error = error or f"status update failed: {e}"
        return Published(actuated, error)

    async def _record_events(self, v: VariantSpec, d: Decision, resolved: bool, input_error: str) -> None:
        """Upstream's order, which decides the one Event a variant gets per cycle: problems first."""
        if input_error:
            await self._events.record(
                v, events.OPTIMIZATION_FAILED, "Saturation data could not be read; holding replicas"
            )
        elif d.reason is Reason.NO_METRICS:
            await self._events.record(
                v,
                events.METRICS_UNAVAILABLE,
                "No saturation metrics available - pods may not be ready or metrics not yet scraped",
            )
        if not resolved:
            await self._events.record(
                v,
                events.ACCELERATOR_NOT_RESOLVED,
                "Cannot resolve accelerator type from the workload's nodeSelector/nodeAffinity or the label "
                f'{ACCELERATOR_LABEL}; wva_desired_replicas is emitted with accelerator_type="unresolved"',
            )
        if d.target > d.current:
            await self._events.record(
                v, events.SCALED_UP, f"Scaled up from {d.current} to {d.target} ({d.reason.value})"
            )
        elif d.target < d.current:
            kind = events.SCALED_TO_ZERO if d.target == 0 else events.SCALED_DOWN
            await self._events.record(v, kind, f"Scaled down from {d.current} to {d.target} ({d.reason.value})")
        if d.limited_by:
            await self._events.record(v, events.RESOURCE_CONSTRAINED, f"Scale-up limited by {d.limited_by}")

    def _status(self, v: VariantSpec, d: Decision, wall: float, *, accelerator: str, actuated: bool) -> dict[str, Any]:
        has_metrics = d.reason not in _NO_METRICS
        ready = bool(accelerator)
        conditions = [
            condition(v.conditions, "TargetResolved", True, "TargetFound", f"{v.target_kind} {v.target} found", wall),
            condition(
                v.conditions,
                "MetricsAvailable",
                has_metrics,
                "MetricsFound" if has_metrics else "MetricsMissing",
                "saturation metrics available" if has_metrics else d.message,
                wall,
            ),
            condition(
                v.conditions,
                "OptimizationReady",
                ready,
                d.reason.condition_reason if ready else "AcceleratorMissing",
                d.message
                if ready
                else f"no accelerator from the workload's node selection or label {ACCELERATOR_LABEL}",
                wall,
            ),
        ]
        status: dict[str, Any] = {"conditions": conditions, "actuation": {"applied": actuated}}
        if ready:
            status["desiredOptimizedAlloc"] = {
                "numReplicas": d.target,
                "accelerator": accelerator,
                "lastRunTime": rfc3339(wall),
                "reason": d.reason.value,
            }
        return status

    async def invalid(
        self, source: Source, obj: Mapping[str, Any], key: str, namespace: str, error: str, wall: float
    ) -> None:
        """A declaration that cannot be used: a VariantAutoscaling says why in its status."""
        if source is not Source.VA:
            return
        previous = tuple((obj.get("status") or {}).get("conditions") or ())
        status = {"conditions": [condition(previous, "TargetResolved", False, "InvalidSpec", error, wall)]}
        try:
            await self._cluster.patch_variant_status(VariantKey(namespace, key), status)
        except KubeError as e:
            log.error("status update failed", extra={"variant": f"{namespace}/{key}", "error": str(e)})
