"""The autoscaler cycle: read VariantAutoscalings, Deployments and pods, decide, publish, scale.

Level-triggered: every cycle (default 30 s, upstream's hard-coded engine period) reads a fresh
view through :class:`~epp.autoscale.cluster.Cluster`, so a missed event cannot leave it wrong.
Per model group ``(namespace, modelID)``: map Ready pods to variants through their Deployments,
read their load from the :class:`~epp.autoscale.inputs.MetricsSource`, age pending replicas,
and :func:`~epp.autoscale.analysis.decide`. Then, per variant: patch
``status.desiredOptimizedAlloc`` and the conditions, set the ``wva_*`` gauges, and with
``actuate`` set ``spec.replicas`` through the ``scale`` subresource.

A failure is contained where it happens: a bad VA gets a condition saying why, a group whose
inputs fail keeps its size, an invalid ConfigMap keeps the last good one, one failed write does
not stop the others, and the loop survives a failed cycle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epp.autoscale.analysis import Decision, Reason, VariantInput, decide
from epp.autoscale.cluster import (
    ACCELERATOR_LABEL,
    Cluster,
    DeploymentView,
    PodView,
    VariantError,
    VariantSpec,
    map_pods,
    parse_deployment,
    parse_pod,
    parse_variant,
)
from epp.autoscale.inputs import InputError, MetricsSource, PodTarget
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.pending import DEFAULT_PENDING_TIMEOUT, PendingTracker, replica_counts
from epp.autoscale.thresholds import (
    SATURATION_CONFIGMAP,
    SCALE_TO_ZERO_CONFIGMAP,
    ConfigError,
    SaturationConfig,
    SaturationConfigMap,
    ScaleToZeroConfigMap,
    ThresholdResolver,
    parse_saturation_configmap,
    parse_scale_to_zero_configmap,
)
from epp.autoscale.types import ModelKey, VariantKey
from epp.autoscale.wake import QueueReader
from epp.clock import Clock
from epp.framework.endpoint import ENGINE_TYPE_LABEL
from epp.kube.client import KubeError

__all__ = ["DEFAULT_CONFIG_NAMESPACE", "Controller", "ControllerOptions", "Outcome"]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_NAMESPACE = "workload-variant-autoscaler-system"
_ACTUATING = frozenset({Reason.SATURATED, Reason.TIMEOUT, Reason.SCALE_DOWN, Reason.LIMIT, Reason.IDLE, Reason.WAKE})


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    """Flags of ``epp autoscale`` that shape a cycle, validated once."""

    interval: float = 30.0
    pending_timeout: float = DEFAULT_PENDING_TIMEOUT
    actuate: bool = False
    config_namespace: str = DEFAULT_CONFIG_NAMESPACE
    saturation_configmap: str = SATURATION_CONFIGMAP
    scale_to_zero_configmap: str = SCALE_TO_ZERO_CONFIGMAP
    scale_to_zero: bool = False
    scrape_port: int = 8000
    base: SaturationConfig = field(default_factory=SaturationConfig)

    def __post_init__(self) -> None:
        if self.interval <= 0:
            raise ValueError(f"--interval must be > 0 seconds, got {self.interval}")
        if self.pending_timeout <= 0:
            raise ValueError(f"--pending-timeout must be > 0 seconds, got {self.pending_timeout}")
        if not 0 < self.scrape_port < 65536:
            raise ValueError(f"--scrape-port must be a TCP port, got {self.scrape_port}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one cycle did for one VA: the decision (if any) and whether it was written and applied."""

    variant: VariantKey
    decision: Decision | None
    error: str = ""
    actuated: bool = False


@dataclass(slots=True)
class _Namespace:
    deployments: dict[str, DeploymentView]
    pods: dict[str, list[PodView]]


def _rfc3339(wall: float) -> str:
    return dt.datetime.fromtimestamp(int(wall), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Controller:
    """One autoscaler; ``run_cycle()`` is the whole algorithm, ``run()`` repeats it on the clock."""

    def __init__(
        self,
        cluster: Cluster,
        source: MetricsSource,
        *,
        clock: Clock,
        metrics: AutoscalerMetrics | None = None,
        options: ControllerOptions | None = None,
        wake: QueueReader | None = None,
    ) -> None:
        self._cluster = cluster
        self._source = source
        self._wake = wake
        self._clock = clock
        self._metrics = metrics if metrics is not None else AutoscalerMetrics()
        self.options = options or ControllerOptions()
        self._pending = PendingTracker(self.options.pending_timeout)
        self._configs: dict[tuple[str, str], tuple[str, Any]] = {}  # (ns, name) → (resourceVersion, parsed)
        self.last_outcomes: dict[VariantKey, Outcome] = {}

    async def run(self, *, on_cycle: Callable[[dict[VariantKey, Outcome]], None] | None = None) -> None:
        """Run cycles every ``interval`` until cancelled; a failed cycle is logged and retried.

        ``on_cycle`` sees each cycle's outcomes (``epp dev`` prints the decisions that changed).
        """
        while True:
            try:
                outcomes = await self.run_cycle()
                if on_cycle is not None:
                    on_cycle(outcomes)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("autoscaler cycle failed")
            await self._clock.sleep(self.options.interval)

    async def run_cycle(self) -> dict[VariantKey, Outcome]:
        """One full pass over every VariantAutoscaling; returns what happened to each."""
        now, wall = self._clock.now(), self._clock.wall()
        outcomes: dict[VariantKey, Outcome] = {}
        variants: list[VariantSpec] = []
        for obj in await self._cluster.list_variant_autoscalings():
            try:
                variants.append(parse_variant(obj))
            except VariantError as e:
                meta = obj.get("metadata") or {}
                key = VariantKey(str(meta.get("namespace") or "default"), str(meta.get("name") or ""))
                log.warning("invalid VariantAutoscaling", extra={"variant": str(key), "error": str(e)})
                outcomes[key] = Outcome(key, None, error=str(e))
                await self._write_invalid(key, str(e), obj, wall)
        namespaces = sorted({v.key.namespace for v in variants})
        views = dict(
            zip(namespaces, await asyncio.gather(*(self._read_namespace(ns) for ns in namespaces)), strict=True)
        )
        resolver = await self._resolver(namespaces)
        queued = await self._wake.queued() if self._wake is not None else {}
        groups: dict[ModelKey, list[VariantSpec]] = {}
        for v in variants:
            groups.setdefault(v.model, []).append(v)
        for model in sorted(groups):
            group = await self._run_group(model, groups[model], views[model.namespace], resolver, now, queued)
            for outcome in group:
                outcomes[outcome.variant] = outcome
        by_key = {v.key: v for v in variants}
        for key, outcome in list(outcomes.items()):
            if outcome.decision is not None:
                outcomes[key] = await self._publish(by_key[key], outcome, views[key.namespace], wall)
        self._pending.retain(by_key)
        self._metrics.retain(k for k, o in outcomes.items() if o.decision is not None and by_key[k].accelerator)
        self.last_outcomes = outcomes
        return outcomes

    async def _read_namespace(self, namespace: str) -> _Namespace:
        deps_raw, rs_raw, pods_raw = await asyncio.gather(
            self._cluster.list_deployments(namespace),
            self._cluster.list_replicasets(namespace),
            self._cluster.list_pods(namespace),
        )
        deployments = [parse_deployment(d) for d in deps_raw]
        pods = map_pods(deployments, rs_raw, [parse_pod(p) for p in pods_raw])
        return _Namespace({d.name: d for d in deployments if not d.deleting}, pods)

    # --- configuration -------------------------------------------------------------------------

    async def _configmap(self, namespace: str, name: str, parser: Any) -> Any:
        """Parsed ConfigMap, cached by resourceVersion; an invalid one keeps the last good parse."""
        obj = await self._cluster.get_configmap(namespace, name)
        cache_key = (namespace, name)
        if obj is None:
            self._configs.pop(cache_key, None)
            return None
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        cached = self._configs.get(cache_key)
        if cached is not None and cached[0] == version and version:
            return cached[1]
        try:
            parsed = parser(obj.get("data") or {}, source=f"{namespace}/{name}")
        except ConfigError as e:
            last = cached[1] if cached else None
            log.error(
                "invalid autoscaler ConfigMap; keeping the last good version",
                extra={"configmap": f"{namespace}/{name}", "error": str(e), "kept": last is not None},
            )
            self._configs[cache_key] = (version, last)
            return last
        self._configs[cache_key] = (version, parsed)
        return parsed

    async def _resolver(self, namespaces: Sequence[str]) -> ThresholdResolver:
        o = self.options
        sat_global: SaturationConfigMap | None = await self._configmap(
            o.config_namespace, o.saturation_configmap, parse_saturation_configmap
        )
        stz_global: ScaleToZeroConfigMap | None = await self._configmap(
            o.config_namespace, o.scale_to_zero_configmap, parse_scale_to_zero_configmap
        )
        sat_local: dict[str, SaturationConfigMap] = {}
        stz_local: dict[str, ScaleToZeroConfigMap] = {}
        for ns in namespaces:
            if ns == o.config_namespace:
                continue
            if (sat := await self._configmap(ns, o.saturation_configmap, parse_saturation_configmap)) is not None:
                sat_local[ns] = sat
            if (stz := await self._configmap(ns, o.scale_to_zero_configmap, parse_scale_to_zero_configmap)) is not None:
                stz_local[ns] = stz
        return ThresholdResolver(
            saturation=sat_global,
            saturation_local=sat_local,
            scale_to_zero=stz_global,
            scale_to_zero_local=stz_local,
            base=o.base,
            scale_to_zero_default=o.scale_to_zero,
        )

    # --- one model group ------------------------------------------------------------------------

    def _targets(self, pods: Sequence[PodView]) -> list[PodTarget]:
        return [
            PodTarget(
                p.namespace,
                p.name,
                p.ip,
                p.metrics_port or self.options.scrape_port,
                p.labels.get(ENGINE_TYPE_LABEL) or "vllm",
            )
            for p in pods
            if p.ready and p.ip
        ]

    async def _run_group(
        self,
        key: ModelKey,
        members: Sequence[VariantSpec],
        ns: _Namespace,
        resolver: ThresholdResolver,
        now: float,
        queued: Mapping[str, float],
    ) -> list[Outcome]:
        outcomes: list[Outcome] = []
        active: list[tuple[VariantSpec, DeploymentView, list[PodTarget]]] = []
        for va in sorted(members, key=lambda v: v.key):
            dep = ns.deployments.get(va.deployment)
            if dep is None:
                outcomes.append(Outcome(va.key, None, error=f"Deployment {key.namespace}/{va.deployment} not found"))
            elif dep.spec_replicas == 0 and queued.get(key.model_id, 0) > 0:
                msg = f"the picker holds {queued[key.model_id]:g} request(s) for {key.model_id}"
                outcomes.append(Outcome(va.key, Decision(va.key, 0, 1, Reason.WAKE, msg)))
            elif dep.spec_replicas == 0:
                msg = "the Deployment is at zero replicas and no picker holds a request for its model"
                if self._wake is None:
                    msg = "the Deployment is at zero replicas; scale-from-zero needs --epp-metrics-url"
                outcomes.append(Outcome(va.key, Decision(va.key, 0, 0, Reason.INACTIVE, msg)))
            else:
                active.append((va, dep, self._targets(ns.pods.get(dep.name, ()))))
        if not active:
            return outcomes
        targets = [t for _, _, ts in active for t in ts]
        error = ""
        try:
            readings = await self._source.collect(key, targets)
        except InputError as e:
            log.warning("cannot read load", extra={"model": str(key), "error": str(e)})
            readings, error = {}, str(e)
        inputs: list[VariantInput] = []
        for va, dep, ts in active:
            current, pending = replica_counts(
                spec_replicas=dep.spec_replicas, status_replicas=dep.status_replicas, ready_replicas=dep.ready_replicas
            )
            ps = self._pending.observe(va.key, pending, now)
            hold = self._pending.hold(va.key, previous_target=va.previous_target, current=current, now=now)
            inputs.append(
                VariantInput(
                    key=va.key,
                    cost=va.cost,
                    current=current,
                    replicas=tuple(readings[t.name] for t in ts if t.name in readings),
                    pending=ps.pending,
                    blocking_pending=ps.blocking,
                    oldest_pending_age=ps.oldest_age,
                    held_at=hold.target,
                    min_replicas=va.min_replicas,
                    max_replicas=va.max_replicas,
                )
            )
        idle = ""
        stz = resolver.scale_to_zero(key)
        if stz.enabled and readings and await self._source.idle(key, targets, stz.retention_seconds):
            idle = f"no requests for {stz.retention_seconds:g}s (scale-to-zero enabled)"
        for d in decide(inputs, resolver.saturation(key), idle=idle):
            if error and d.reason is Reason.NO_METRICS:
                d = dataclasses.replace(d, message=f"cannot read load: {error}")
            outcomes.append(Outcome(d.variant, d))
        return outcomes

    # --- outputs ----------------------------------------------------------------------------------

    async def _publish(self, va: VariantSpec, outcome: Outcome, ns: _Namespace, wall: float) -> Outcome:
        d = outcome.decision
        assert d is not None
        dep = ns.deployments.get(va.deployment)
        actuated = False
        direct = self.options.actuate or d.reason is Reason.WAKE  # WVA scales from zero directly, always
        if direct and dep is not None and d.reason in _ACTUATING and d.target != dep.spec_replicas:
            try:
                await self._cluster.scale_deployment(va.key.namespace, va.deployment, d.target)
                actuated = True
            except KubeError as e:  # one failed write must not stop the others; the next cycle retries
                log.error("scaling failed", extra={"variant": str(va.key), "target": d.target, "error": str(e)})
                outcome = dataclasses.replace(outcome, error=f"scaling to {d.target} failed: {e}")
        if d.target != d.current:
            self._metrics.count(va.key, direction="up" if d.target > d.current else "down", reason=d.reason.value)
        if va.accelerator:
            self._metrics.publish(va.key, accelerator=va.accelerator, desired=d.target, current=d.current)
        log.info(
            "autoscaler decision",
            extra={
                "variant": str(va.key),
                "current": d.current,
                "target": d.target,
                "reason": d.reason.value,
                "detail": d.message,
            },
        )
        status = self._status(va, d, wall, actuated=actuated)
        try:
            await self._cluster.patch_variant_status(va.key, status)
        except KubeError as e:
            log.error("status update failed", extra={"variant": str(va.key), "error": str(e)})
            outcome = dataclasses.replace(outcome, error=f"status update failed: {e}")
        return dataclasses.replace(outcome, actuated=actuated)

    def _status(self, va: VariantSpec, d: Decision, wall: float, *, actuated: bool) -> dict[str, Any]:
        has_metrics = d.reason not in (Reason.NO_METRICS, Reason.INACTIVE)
        ready = bool(va.accelerator)
        conditions = [
            _condition(va.conditions, "TargetResolved", True, "TargetFound", f"Deployment {va.deployment} found", wall),
            _condition(
                va.conditions,
                "MetricsAvailable",
                has_metrics,
                "MetricsFound" if has_metrics else "MetricsMissing",
                "saturation metrics available" if has_metrics else d.message,
                wall,
            ),
            _condition(
                va.conditions,
                "OptimizationReady",
                ready,
                d.reason.condition_reason if ready else "AcceleratorMissing",
                d.message if ready else f"label {ACCELERATOR_LABEL} is required to publish a target",
                wall,
            ),
        ]
        status: dict[str, Any] = {"conditions": conditions, "actuation": {"applied": actuated}}
        if ready:
            status["desiredOptimizedAlloc"] = {
                "numReplicas": d.target,
                "accelerator": va.accelerator,
                "lastRunTime": _rfc3339(wall),
                "reason": d.reason.value,
            }
        return status

    async def _write_invalid(self, key: VariantKey, error: str, obj: Mapping[str, Any], wall: float) -> None:
        previous = tuple((obj.get("status") or {}).get("conditions") or ())
        status = {"conditions": [_condition(previous, "TargetResolved", False, "InvalidSpec", error, wall)]}
        try:
            await self._cluster.patch_variant_status(key, status)
        except KubeError as e:
            log.error("status update failed", extra={"variant": str(key), "error": str(e)})


def _condition(
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
        "lastTransitionTime": since or _rfc3339(wall),
    }
