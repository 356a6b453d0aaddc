"""The autoscaler cycle: discover variants, read workloads and pods, decide per model, limit, publish.

Level-triggered: every cycle (default 15 s, upstream's ``GLOBAL_OPT_INTERVAL``) reads a fresh view
through :class:`~epp.autoscale.cluster.Cluster`, so a missed event cannot leave it wrong. Variants
come from annotated HPAs and ScaledObjects, or VariantAutoscalings (:mod:`epp.autoscale.variants`);
per model group ``(namespace, modelID)``: map Ready pods to variants through their workloads,
read their load, age pending replicas, and decide (:mod:`epp.autoscale.decide`). Then the quota
limiter across every model, and per variant the outputs (:mod:`epp.autoscale.publish`).

A failure is contained where it happens: a bad declaration is reported and skipped, a group whose
inputs fail keeps its size, an invalid ConfigMap keeps the last good one, one failed write does not
stop the others, and the loop survives a failed cycle.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from epp.autoscale.cluster import Cluster, PodView, parse_pod
from epp.autoscale.configmaps import ConfigMaps
from epp.autoscale.decide import GroupDecider, Member
from epp.autoscale.decision import Decision, Reason
from epp.autoscale.events import EventRecorder
from epp.autoscale.inputs import InputError, MetricsSource, ModelSignals, PodTarget
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.pending import DEFAULT_PENDING_TIMEOUT, PendingTracker, replica_counts
from epp.autoscale.publish import Publisher
from epp.autoscale.quota import Proposal, apply_limiters
from epp.autoscale.saturation_config import SATURATION_CONFIGMAP, SaturationConfig
from epp.autoscale.scaletargets import DEPLOYMENT, LWS, ScaleTargetView, accelerator_of, map_pods, parse_scale_target
from epp.autoscale.thresholds import SCALE_TO_ZERO_CONFIGMAP, ThresholdResolver
from epp.autoscale.types import ModelKey, ReplicaMetrics, VariantKey
from epp.autoscale.variants import VariantSpec, discover
from epp.autoscale.wake import PickerReader, PickerView
from epp.clock import Clock
from epp.framework.endpoint import ENGINE_TYPE_LABEL

__all__ = ["DEFAULT_CONFIG_NAMESPACE", "DEFAULT_INTERVAL", "Controller", "ControllerOptions", "Outcome"]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_NAMESPACE = "workload-variant-autoscaler-system"
DEFAULT_INTERVAL = 15.0


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    """Flags of ``epp autoscale`` that shape a cycle, validated once."""

    interval: float = DEFAULT_INTERVAL
    pending_timeout: float = DEFAULT_PENDING_TIMEOUT
    actuate: bool = False
    config_namespace: str = DEFAULT_CONFIG_NAMESPACE
    saturation_configmap: str = SATURATION_CONFIGMAP
    scale_to_zero_configmap: str = SCALE_TO_ZERO_CONFIGMAP
    scale_to_zero: bool = False
    scrape_port: int = 8000
    watch_namespace: str = ""
    controller_instance: str = ""
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
    """What one cycle did for one variant: the decision (if any) and whether it was written and applied."""

    variant: VariantKey
    decision: Decision | None
    error: str = ""
    actuated: bool = False


@dataclass(slots=True)
class _Namespace:
    targets: dict[tuple[str, str], ScaleTargetView]
    pods: dict[tuple[str, str], list[PodView]]


@dataclass(slots=True)
class _Decided:
    variant: VariantSpec
    decision: Decision
    target: ScaleTargetView | None
    accelerator: str
    gpus: int = 1
    error: str = ""
    priority: float = 1.0


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
        picker: PickerReader | None = None,
    ) -> None:
        self._cluster = cluster
        self._source = source
        self._picker = picker
        self._clock = clock
        self.options = options or ControllerOptions()
        self._metrics = metrics if metrics is not None else AutoscalerMetrics()
        self._pending = PendingTracker(self.options.pending_timeout)
        self._configs = ConfigMaps(
            cluster, self.options, on_error=lambda: self._metrics.error("controller", "invalid ConfigMap")
        )
        self._decider = GroupDecider(self.options.interval)
        self._events = EventRecorder(cluster, clock)
        self._publisher = Publisher(cluster, self._metrics, self._events, actuate=self.options.actuate)
        self._last_target: dict[VariantKey, int] = {}
        self.last_outcomes: dict[VariantKey, Outcome] = {}

    @property
    def decider(self) -> GroupDecider:
        return self._decider

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
                self._metrics.error("controller", "cycle failed")
            await self._clock.sleep(self.options.interval)

    async def run_cycle(self) -> dict[VariantKey, Outcome]:
        """One full pass over every variant; returns what happened to each."""
        started = self._clock.now()
        ok = False
        models = 0
        try:
            outcomes, models = await self._cycle()
            ok = True
            return outcomes
        finally:
            self._metrics.cycle(self._clock.now() - started, ok=ok, models=models)

    async def _cycle(self) -> tuple[dict[VariantKey, Outcome], int]:
        now, wall = self._clock.now(), self._clock.wall()
        self._events.next_cycle()
        vas, hpas, scaled = await asyncio.gather(
            self._cluster.list_variant_autoscalings(), self._cluster.list_hpas(), self._cluster.list_scaled_objects()
        )
        o = self.options
        found = discover(
            hpas=hpas,
            scaled_objects=scaled,
            variant_autoscalings=vas,
            namespace=o.watch_namespace,
            controller_instance=o.controller_instance,
        )
        outcomes: dict[VariantKey, Outcome] = {}
        for source, key, obj, error in found.invalid:
            log.warning("invalid variant declaration", extra={"variant": f"{source.value} {key}", "error": error})
            outcomes[key] = Outcome(key, None, error=error)
            await self._publisher.invalid(source, obj, key.name, key.namespace, error, wall)
        variants = list(found.variants)
        namespaces = sorted({v.key.namespace for v in variants})
        views = dict(zip(namespaces, await asyncio.gather(*(self._read(ns) for ns in namespaces)), strict=True))
        resolver = await self._configs.resolver(namespaces)
        self._configuration(resolver)
        picker = await self._picker.read() if self._picker is not None else None
        groups: dict[ModelKey, list[VariantSpec]] = {}
        for v in variants:
            groups.setdefault(v.model, []).append(v)
        decided: list[_Decided] = []
        missing: dict[VariantKey, str] = {}
        for model in sorted(groups):
            decided += await self._group(model, groups[model], views[model.namespace], resolver, now, picker, missing)
        outcomes.update({key: Outcome(key, None, error=error) for key, error in missing.items()})
        self._limit(decided, resolver)
        for d in decided:
            published = await self._publisher.publish(
                d.variant,
                d.decision,
                kind=d.target.kind if d.target else d.variant.target_kind,
                spec_replicas=d.target.spec_replicas if d.target else None,
                accelerator=d.accelerator,
                wall=wall,
                input_error=d.error,
            )
            self._last_target[d.variant.key] = d.decision.target
            outcomes[d.variant.key] = Outcome(d.variant.key, d.decision, d.error or published.error, published.actuated)
        self._retain(variants, groups)
        self.last_outcomes = outcomes
        return outcomes, len(groups)

    def _configuration(self, resolver: ThresholdResolver) -> None:
        base = resolver.global_default
        self._metrics.configuration(
            analyzer="saturation" if base.v2 else "",
            limiter=bool(resolver.limiters),
            scale_to_zero=self.options.scale_to_zero,
            kv_spare=base.kv_spare_trigger,
            queue_spare=base.queue_spare_trigger,
            interval=self.options.interval,
        )

    def _retain(self, variants: Sequence[VariantSpec], groups: Mapping[ModelKey, Any]) -> None:
        keys = {v.key for v in variants}
        self._pending.retain(keys)
        self._metrics.retain(keys)
        self._decider.retain(set(groups))
        self._events.retain({(k.namespace, k.name) for k in keys})
        for key in [k for k in self._last_target if k not in keys]:
            del self._last_target[key]

    async def _read(self, namespace: str) -> _Namespace:
        deps, groups, rs_raw, pods_raw = await asyncio.gather(
            self._cluster.list_deployments(namespace),
            self._cluster.list_leaderworkersets(namespace),
            self._cluster.list_replicasets(namespace),
            self._cluster.list_pods(namespace),
        )
        targets = [parse_scale_target(DEPLOYMENT, d) for d in deps] + [parse_scale_target(LWS, g) for g in groups]
        pods = [parse_pod(p) for p in pods_raw]
        self._metrics.pods_discovered(namespace, sum(1 for p in pods if p.ready))
        return _Namespace({(t.kind, t.name): t for t in targets if not t.deleting}, map_pods(targets, rs_raw, pods))

    def _pod_targets(self, pods: Sequence[PodView], target: ScaleTargetView) -> list[PodTarget]:
        return [
            PodTarget(
                p.namespace,
                p.name,
                p.ip,
                p.metrics_port or self.options.scrape_port,
                p.labels.get(ENGINE_TYPE_LABEL) or target.engine,
            )  # fmt: skip
            for p in pods
            if p.ready and p.ip
        ]

    async def _signals(self, model: ModelKey, picker: PickerView | None) -> ModelSignals | None:
        if picker is not None:
            return picker.signals.get(model.model_id, ModelSignals())
        return await self._source.model_signals(model)

    async def _group(
        self, model: ModelKey, specs: Sequence[VariantSpec], ns: _Namespace, resolver: ThresholdResolver, now: float,
        picker: PickerView | None, missing: dict[VariantKey, str],
    ) -> list[_Decided]:  # fmt: skip
        out: list[_Decided] = []
        active: list[tuple[VariantSpec, ScaleTargetView, str, list[PodTarget]]] = []
        for v in sorted(specs, key=lambda v: v.key):
            target = ns.targets.get((v.target_kind, v.target))
            if target is None:
                error = f"{v.target_kind} {model.namespace}/{v.target} not found"
                log.warning("scale target not found", extra={"variant": str(v.key), "error": error})
                missing[v.key] = error
                continue
            accel = accelerator_of(target.template, v.labels)
            if target.spec_replicas == 0:
                queued = picker.queued(model.model_id) if picker is not None else 0.0
                if queued > 0:
                    d = Decision(
                        v.key, 0, 1, Reason.WAKE, f"the picker holds {queued:g} request(s) for {model.model_id}"
                    )
                else:
                    msg = "the workload is at zero replicas and no picker holds a request for its model"
                    if picker is None:
                        msg = "the workload is at zero replicas; scale-from-zero needs --epp-metrics-url"
                    d = Decision(v.key, 0, 0, Reason.INACTIVE, msg)
                out.append(_Decided(v, d, target, accel, target.gpus_per_replica))
                continue
            active.append((v, target, accel, self._pod_targets(ns.pods.get((target.kind, target.name), ()), target)))
        if not active:
            return out
        pods = [p for *_, ts in active for p in ts]
        error = ""
        readings: list[ReplicaMetrics] = []
        started = self._clock.now()
        try:
            readings = await self._source.collect(model, pods)
        except InputError as e:
            log.warning("cannot read load", extra={"model": str(model), "error": str(e)})
            error = str(e)
            self._metrics.error("collector", "collection failed")
        self._metrics.collected("replica_metrics", self._clock.now() - started, error="query failed" if error else "")
        cfg = resolver.saturation(model)
        members = [self._member(v, t, accel, [r for r in readings if r.pod in {p.name for p in ts}], now, v2=cfg.v2)
                   for v, t, accel, ts in active]  # fmt: skip
        for m, (_, _, _, ts) in zip(members, active, strict=True):
            self._metrics.freshness_status(
                m.spec.key, fresh=len(m.replicas), missing=max(0, len(ts) - len({r.pod for r in m.replicas}))
            )
        idle = ""
        stz = resolver.scale_to_zero(model)
        if stz.enabled and readings and await self._source.idle(model, pods, stz.retention_seconds):
            idle = f"no requests for {stz.retention_seconds:g}s (scale-to-zero enabled)"
            self._metrics.enforcer("scale_to_zero")
        signals = await self._signals(model, picker) if cfg.v2 else None
        decisions = self._decider.decide(model, members, cfg, now=now, idle=idle, signals=signals)
        by_key = {m.spec.key: m for m in members}
        for d in decisions:
            if error and d.reason is Reason.NO_METRICS:
                d = dataclasses.replace(d, message=f"cannot read load: {error}")
            m = by_key[d.variant]
            out.append(_Decided(m.spec, d, m.target, m.accelerator, m.target.gpus_per_replica, error, cfg.priority))
        return out

    def _member(
        self, v: VariantSpec, t: ScaleTargetView, accel: str, readings: list[ReplicaMetrics], now: float, *, v2: bool
    ) -> Member:
        current, pending = replica_counts(
            spec_replicas=t.spec_replicas, status_replicas=t.status_replicas, ready_replicas=t.ready_replicas
        )
        state = self._pending.observe(v.key, pending, now)
        previous = v.previous_target or self._last_target.get(v.key, 0)
        hold = None if v2 else self._pending.hold(v.key, previous_target=previous, current=current, now=now).target
        return Member(v, t, accel, current, state, hold, tuple(readings))

    def _limit(self, decided: Sequence[_Decided], resolver: ThresholdResolver) -> None:
        """The quota limiter over every model's scale-ups (upstream applies it cluster-wide)."""
        limiters = resolver.limiters
        if not limiters:
            return
        proposals = [
            Proposal(
                namespace=d.variant.key.namespace,
                name=d.variant.key.name,
                accelerator=d.accelerator,
                gpus_per_replica=d.gpus,
                current=d.decision.current,
                target=d.decision.target,
                min_replicas=d.variant.min_replicas,
                cost=d.variant.cost,
                spare=d.decision.signals.spare if d.decision.signals else 0.0,
                priority=d.priority,
            )
            for d in decided
        ]
        limited = apply_limiters(limiters, proposals)
        for d, p in zip(decided, proposals, strict=True):
            d.accelerator = p.accelerator  # an unknown type the limiters resolved (they know only one)
        for p in limited:
            d = next(x for x in decided if (x.variant.key.namespace, x.variant.key.name) == (p.namespace, p.name))
            d.decision = dataclasses.replace(
                d.decision,
                target=p.target,
                reason=Reason.QUOTA if p.target <= d.decision.current else d.decision.reason,
                message=f"limited by quota {p.limited_by} ({p.accelerator}); {d.decision.message}",
                limited_by=p.limited_by,
            )
