"""A simulated HorizontalPodAutoscaler controller (kube-controller-manager's) for the fake cluster.

Each :meth:`HpaController.sync` (:class:`~epp_sim.scalers.ClusterScalers` runs one every
``sync_period``, 15 s like ``--horizontal-pod-autoscaler-sync-period``) does, for every
``autoscaling/v2`` HPA, what the real controller does with External metrics:

- the target's replicas through its ``scale`` subresource (a Deployment, or any kind served with
  one: a LeaderWorkerSet); a target at 0 with ``minReplicas > 0`` is left alone ("scaling
  disabled"); one outside [min, max] is brought back first;
- per metric, the value from an :class:`ExternalMetrics` provider: for an ``AverageValue`` target
  ``ceil(value / target)`` replicas, for a ``Value`` target ``ceil(current · value / target)``; a
  ratio within the tolerance (10%) of 1 keeps the current count; the largest over the metrics wins;
- ``behavior``: stabilization (scale-up takes the lowest recommendation of its window, default 0 s;
  scale-down the highest of its, default 300 s) and rate policies (``Pods`` / ``Percent`` per
  ``periodSeconds``, ``selectPolicy`` Max, Min or Disabled; defaults: up max(100%, 4 pods) per
  15 s, down 100% per 15 s), then [minReplicas, maxReplicas];
- ``status``: ``currentReplicas``, ``desiredReplicas``, ``currentMetrics``, ``lastScaleTime`` and
  the ``AbleToScale`` / ``ScalingActive`` / ``ScalingLimited`` conditions.

Metric values come from :class:`AdapterMetrics` (prometheus-adapter's rule for
``wva_desired_replicas``: the HPA's namespace matched as ``exported_namespace``) or, for an HPA KEDA
made, from :mod:`epp_sim.scalers.keda`. Other metric types (Resource, Pods, Object) are not
simulated: such a metric marks ``ScalingActive`` False with a reason that names it.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from epp.clock import Clock, SystemClock
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.kinds import Obj
from epp_sim.apiserver.store import Store
from epp_sim.scalers.prometheus import PrometheusStandIn, QueryError

__all__ = ["AdapterMetrics", "ExternalMetrics", "HpaController", "MetricError"]

log = logging.getLogger(__name__)

TOLERANCE = 0.1
_DEFAULT_UP = {
    "stabilizationWindowSeconds": 0,
    "selectPolicy": "Max",
    "policies": [
        {"type": "Percent", "value": 100, "periodSeconds": 15},
        {"type": "Pods", "value": 4, "periodSeconds": 15},
    ],
}
_DEFAULT_DOWN = {
    "stabilizationWindowSeconds": 300,
    "selectPolicy": "Max",
    "policies": [{"type": "Percent", "value": 100, "periodSeconds": 15}],
}


class MetricError(Exception):
    """A metric value could not be had; the message says which and why."""


class ExternalMetrics(Protocol):
    """The ``external.metrics.k8s.io`` API as an HPA in ``namespace`` reads it."""

    async def values(self, namespace: str, name: str, selector: Mapping[str, str]) -> list[float]:
        """Every series' value for ``name`` matching ``selector``; raises :class:`MetricError`."""
        ...


class AdapterMetrics:
    """prometheus-adapter with upstream WVA's rule: ``exported_namespace`` is the HPA's namespace."""

    def __init__(self, prometheus: PrometheusStandIn) -> None:
        self._prometheus = prometheus

    async def values(self, namespace: str, name: str, selector: Mapping[str, str]) -> list[float]:
        series = self._prometheus.select(name, {**selector, "exported_namespace": namespace})
        if not series:
            raise MetricError(f"no series of {name} match {dict(selector)} in namespace {namespace}")
        return [v for _, v in series]


def _quantity(value: Any) -> float:
    text = str(value)
    if text.endswith("m"):
        return float(text[:-1]) / 1000
    return float(text)


def _now_text(wall: float) -> str:
    return dt.datetime.fromtimestamp(int(wall), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(slots=True)
class _History:
    recommendations: list[tuple[float, int]]
    ups: list[tuple[float, int]]
    downs: list[tuple[float, int]]


def _limit(current: int, events: Sequence[tuple[float, int]], rules: Mapping[str, Any], now: float, *, up: bool) -> int:
    if rules.get("selectPolicy") == "Disabled":
        return current
    limits = []
    for p in rules.get("policies") or ():
        period = float(p.get("periodSeconds") or 15)
        moved = sum(n for t, n in events if t > now - period)
        start = current - moved if up else current + moved
        value = int(p.get("value") or 0)
        if p.get("type") == "Pods":
            limits.append(start + value if up else start - value)
        else:
            limits.append(math.ceil(start * (1 + value / 100)) if up else int(start * (1 - value / 100)))
    if not limits:
        return current
    pick_most = rules.get("selectPolicy", "Max") != "Min"
    if up:
        return max(limits) if pick_most else min(limits)
    return min(limits) if pick_most else max(limits)


class HpaController:
    """Keeps every HPA's target at what its metrics ask for; :meth:`sync` once, or :meth:`run` as a loop."""

    def __init__(self, store: Store, metrics: ExternalMetrics, *, clock: Clock | None = None) -> None:
        self._store = store
        self._metrics = metrics
        self._clock = clock or SystemClock()
        self._history: dict[tuple[str, str], _History] = {}

    async def sync(self) -> None:
        """One pass over every HPA."""
        for hpa in self._store.list("horizontalpodautoscalers.autoscaling"):
            meta = hpa["metadata"]
            try:
                await self._one(hpa)
            except ApiError as e:
                log.warning(
                    "hpa reconcile failed", extra={"hpa": f"{meta.get('namespace')}/{meta['name']}", "error": str(e)}
                )
        live = {
            (h["metadata"].get("namespace", ""), h["metadata"]["name"])
            for h in self._store.list("horizontalpodautoscalers.autoscaling")
        }
        for key in [k for k in self._history if k not in live]:
            del self._history[key]

    def _target(self, ns: str, ref: Mapping[str, Any]) -> tuple[str, Obj] | None:
        api_version = str(ref.get("apiVersion") or "apps/v1")
        group = api_version.partition("/")[0] if "/" in api_version else ""
        kind = f"{ref.get('kind')}.{group}" if group else str(ref.get("kind"))
        try:
            rt = self._store.type_of(kind)
        except ApiError:
            return None
        found = self._store.lookup(rt, str(ref.get("name")), ns)
        return (kind, found) if found is not None else None

    async def _desired(self, ns: str, spec: Mapping[str, Any], current: int) -> tuple[int | None, list[Obj], str]:
        """``(replicas the metrics ask for or None, currentMetrics, problem)``."""
        proposals: list[int] = []
        statuses: list[Obj] = []
        for m in spec.get("metrics") or ():
            if m.get("type") != "External":
                return None, statuses, f"metric type {m.get('type')!r} is not simulated (External only)"
            ext = m.get("external") or {}
            metric, target = ext.get("metric") or {}, ext.get("target") or {}
            selector = ((metric.get("selector") or {}).get("matchLabels")) or {}
            try:
                usage = sum(await self._metrics.values(ns, str(metric.get("name")), selector))
            except (MetricError, QueryError) as e:
                return None, statuses, str(e)
            if target.get("type") == "AverageValue":
                per = _quantity(target.get("averageValue"))
                ratio = usage / (per * current) if per > 0 and current > 0 else math.inf
                n = current if abs(1 - ratio) <= TOLERANCE else math.ceil(usage / per) if per > 0 else current
                statuses.append(
                    {
                        "type": "External",
                        "external": {"metric": metric, "current": {"averageValue": f"{usage / max(current, 1):g}"}},
                    }
                )
            else:
                goal = _quantity(target.get("value"))
                ratio = usage / goal if goal > 0 else math.inf
                n = current if abs(1 - ratio) <= TOLERANCE else math.ceil(current * ratio)
                statuses.append(
                    {"type": "External", "external": {"metric": metric, "current": {"value": f"{usage:g}"}}}
                )
            proposals.append(int(n))
        return (max(proposals) if proposals else None), statuses, ""

    async def _one(self, hpa: Obj) -> None:
        ns, name, spec = hpa["metadata"].get("namespace", ""), hpa["metadata"]["name"], hpa.get("spec") or {}
        now, wall = self._clock.now(), self._clock.wall()
        low, high = int(spec.get("minReplicas", 1)), int(spec["maxReplicas"])
        found = self._target(ns, spec.get("scaleTargetRef") or {})
        if found is None:
            self._status(hpa, 0, 0, [], wall, able=("FailedGetScale", "the scale target does not exist"))
            return
        kind, target = found
        current = int((target.get("spec") or {}).get("replicas", 1))
        history = self._history.setdefault((ns, name), _History([], [], []))
        if current == 0 and low > 0:
            self._status(
                hpa,
                0,
                0,
                [],
                wall,
                active=("ScalingDisabled", "scaling is disabled since the replica count of the target is zero"),
            )
            return
        desired, statuses, problem = await self._desired(ns, spec, current)
        if current > high or current < low:
            proposal, reason = min(max(current, low), high), ("TooManyReplicas" if current > high else "TooFewReplicas")
        elif desired is None:
            self._status(
                hpa, current, current, statuses, wall, active=("FailedGetExternalMetric", problem or "no metrics")
            )
            return
        else:
            proposal, reason = self._normalize(history, spec, current, desired, now), ""
        proposal = min(max(proposal, low), high)
        if proposal != current:
            self._store.patch(
                kind,
                str(spec["scaleTargetRef"]["name"]),
                {"spec": {"replicas": proposal}},
                namespace=ns,
                subresource="scale",
            )
            (history.ups if proposal > current else history.downs).append((now, abs(proposal - current)))
            log.info("sim hpa scaled", extra={"hpa": f"{ns}/{name}", "from": current, "to": proposal})
        limited = ("ScalingLimited", reason) if reason else None
        self._status(hpa, current, proposal, statuses, wall, scaled=proposal != current, limited=limited)

    def _normalize(self, history: _History, spec: Mapping[str, Any], current: int, desired: int, now: float) -> int:
        behavior = spec.get("behavior") or {}
        up = {**_DEFAULT_UP, **(behavior.get("scaleUp") or {})}
        down = {**_DEFAULT_DOWN, **(behavior.get("scaleDown") or {})}
        window = max(float(up["stabilizationWindowSeconds"]), float(down["stabilizationWindowSeconds"]))
        history.recommendations = [(t, r) for t, r in history.recommendations if t > now - window]
        up_rec = min(
            [desired] + [r for t, r in history.recommendations if t > now - float(up["stabilizationWindowSeconds"])]
        )
        down_rec = max(
            [desired] + [r for t, r in history.recommendations if t > now - float(down["stabilizationWindowSeconds"])]
        )
        history.recommendations.append((now, desired))
        recommendation = min(max(current, up_rec), down_rec)
        history.ups = [(t, n) for t, n in history.ups if t > now - 1800]
        history.downs = [(t, n) for t, n in history.downs if t > now - 1800]
        if recommendation > current:
            return min(recommendation, _limit(current, history.ups, up, now, up=True))
        if recommendation < current:
            return max(recommendation, _limit(current, history.downs, down, now, up=False))
        return recommendation

    def _status(
        self,
        hpa: Obj,
        current: int,
        desired: int,
        metrics: list[Obj],
        wall: float,
        *,
        scaled: bool = False,
        able: tuple[str, str] | None = None,
        active: tuple[str, str] | None = None,
        limited: tuple[str, str] | None = None,
    ) -> None:
        old = hpa.get("status") or {}

        def cond(kind: str, bad: tuple[str, str] | None, good: tuple[str, str], *, true_when_bad: bool = False) -> Obj:
            status = ("True" if true_when_bad else "False") if bad else ("False" if true_when_bad else "True")
            reason, message = bad or good
            previous = next((c for c in old.get("conditions") or () if c.get("type") == kind), None)
            since = (
                previous.get("lastTransitionTime") if previous and previous.get("status") == status else _now_text(wall)
            )
            return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": since}

        status: dict[str, Any] = {
            "currentReplicas": current,
            "desiredReplicas": desired,
            "currentMetrics": metrics,
            "observedGeneration": hpa["metadata"].get("generation", 1),
            "conditions": [
                cond("AbleToScale", able, ("ReadyForNewScale", "recommended size matches current size")),
                cond("ScalingActive", active, ("ValidMetricFound", "the HPA calculated a replica count from metrics")),
                cond(
                    "ScalingLimited",
                    limited,
                    ("DesiredWithinRange", "the desired count is within range"),
                    true_when_bad=True,
                ),
            ],
        }
        if scaled:
            status["lastScaleTime"] = _now_text(wall)
        elif old.get("lastScaleTime"):
            status["lastScaleTime"] = old["lastScaleTime"]
        meta = hpa["metadata"]
        self._store.patch(
            "horizontalpodautoscalers.autoscaling",
            meta["name"],
            {"status": status},
            namespace=meta.get("namespace"),
            subresource="status",
        )
