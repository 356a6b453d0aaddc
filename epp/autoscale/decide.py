"""One model group's decisions this cycle: the V2 pipeline (default) or V1, per P/D role, with our guards.

**V2** (a config with ``analyzers``): the saturation analyzer (always), the throughput analyzer when
enabled, calibrated with each one's thresholds, combined by :mod:`epp.autoscale.pipeline`. Pending
replicas count as supply on the way (so a replica that is loading is not asked for twice, and
several replicas may be added in one step), except those older than ``--pending-timeout``: our
guard, so a replica that will never come (no GPU for it) stops holding the model back.

**V1** (no ``analyzers``): :mod:`epp.autoscale.analysis`, once per P/D role (upstream #1036: a
prefill variant's transition does not block decode scaling, and spares are not averaged across
roles); a variant with pending replicas gets no scale-up until they are Ready or time out.

Then, for both: scale-to-zero for an idle model (every variant to its minimum), and
``minReplicas`` / ``maxReplicas`` corrections, which take precedence. (Upstream's enforcer also
gives the cheapest variant one replica when a model not idle would reach zero; here neither
analyzer path can: V1 never goes below 1, and V2's cheapest variant keeps one while no costlier
one has any.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from epp.autoscale.analysis import VariantInput
from epp.autoscale.analysis import decide as decide_v1
from epp.autoscale.capacity import CapacityAnalyzer, VariantState
from epp.autoscale.decision import Decision, Reason, Signals
from epp.autoscale.inputs import ModelSignals
from epp.autoscale.pending import PendingState
from epp.autoscale.pipeline import Liveness, Plan, Vote, binding, optimize
from epp.autoscale.results import AnalyzerResult, calibrate
from epp.autoscale.saturation_config import SATURATION, THROUGHPUT, SaturationConfig
from epp.autoscale.scaletargets import ScaleTargetView
from epp.autoscale.throughput import ThroughputAnalyzer
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.autoscale.variants import VariantSpec

__all__ = ["GroupDecider", "Member"]


@dataclass(frozen=True, slots=True)
class Member:
    """One active variant of the group, as this cycle found it."""

    spec: VariantSpec
    target: ScaleTargetView
    accelerator: str
    current: int
    pending: PendingState
    held_at: int | None = None
    replicas: tuple[ReplicaMetrics, ...] = ()

    def state(self) -> VariantState:
        return VariantState(
            name=self.spec.key.name,
            role=self.target.role,
            cost=self.spec.cost,
            accelerator=self.accelerator,
            gpus_per_replica=self.target.gpus_per_replica,
            current=self.current,
            pending=self.pending.pending,
            coming=self.pending.blocking,
            params=self.target.params,
            replicas=self.replicas,
        )


class GroupDecider:
    """Holds the analyzers' memory across cycles (k2 history, ITL fits, liveness)."""

    def __init__(self, interval: float) -> None:
        self.capacity = CapacityAnalyzer()
        self.throughput = ThroughputAnalyzer()
        self.liveness = Liveness(interval)
        self.last_votes: dict[ModelKey, list[Vote]] = {}

    def retain(self, models: set[ModelKey]) -> None:
        self.capacity.retain(models)
        self.throughput.retain(models)
        self.liveness.retain(models)
        for model in [m for m in self.last_votes if m not in models]:
            del self.last_votes[model]

    def decide(
        self,
        model: ModelKey,
        members: Sequence[Member],
        cfg: SaturationConfig,
        *,
        now: float,
        idle: str = "",
        signals: ModelSignals | None = None,
    ) -> list[Decision]:
        members = sorted(members, key=lambda m: m.spec.key)
        if cfg.v2:
            decisions = self._v2(model, members, cfg, now, signals)
        else:
            decisions = []
            for role in sorted({m.target.role for m in members}):
                decisions += decide_v1([_v1_input(m) for m in members if m.target.role == role], cfg)
        return _enforce(members, decisions, idle)

    def _votes(
        self,
        model: ModelKey,
        states: Sequence[VariantState],
        cfg: SaturationConfig,
        now: float,
        signals: ModelSignals | None,
    ) -> list[Vote]:
        sat_spec = cfg.analyzer(SATURATION)
        sat = calibrate(self.capacity.analyze(model, states, cfg, signals), *cfg.thresholds(SATURATION))
        votes = [
            Vote(SATURATION, sat, sat_spec.score if sat_spec else 1.0, enabled=bool(sat_spec and sat_spec.enabled))
        ]
        tp_spec = cfg.analyzer(THROUGHPUT)
        if tp_spec is not None and tp_spec.enabled:
            tp = self.throughput.analyze(model, states, signals, now)
            votes.append(Vote(THROUGHPUT, calibrate(tp, *cfg.thresholds(THROUGHPUT)), tp_spec.score))
        self.liveness.mark(model, votes, now)
        self.last_votes[model] = votes
        return votes

    def _v2(
        self,
        model: ModelKey,
        members: Sequence[Member],
        cfg: SaturationConfig,
        now: float,
        signals: ModelSignals | None,
    ) -> list[Decision]:
        states = [m.state() for m in members]
        if not any(s.replicas for s in states):  # upstream skips a model with no metrics at all
            message = "no Ready replica reported metrics; keeping the current size"
            return [Decision(m.spec.key, m.current, m.current, Reason.NO_METRICS, message) for m in members]
        votes = self._votes(model, states, cfg, now, signals)
        bounds = {m.spec.key.name: (m.spec.min_replicas, m.spec.max_replicas) for m in members}
        plan = optimize(votes, states, bounds)
        anchor = binding(votes)
        return [
            _v2_decision(m, s, plan, anchor.result if anchor else None, votes)
            for m, s in zip(members, states, strict=True)
        ]


def _v1_input(m: Member) -> VariantInput:
    return VariantInput(
        key=m.spec.key,
        cost=m.spec.cost,
        current=m.current,
        replicas=m.replicas,
        pending=m.pending.pending,
        blocking_pending=m.pending.blocking,
        oldest_pending_age=m.pending.oldest_age,
        held_at=m.held_at,
        min_replicas=m.spec.min_replicas,
        max_replicas=m.spec.max_replicas,
    )


def _fmt(x: float) -> str:
    return f"{x:,.0f}" if abs(x) >= 100 else f"{x:.3g}"


def _reading(result: AnalyzerResult, role: str) -> str:
    required, spare = result.signals(role)
    return (
        f"{result.analyzer}: demand {_fmt(result.demand)}, supply {_fmt(result.supply)} "
        f"(+{_fmt(result.anticipated - result.supply)} pending), required {_fmt(required)}, spare {_fmt(spare)}"
    )


def _v2_decision(
    m: Member, s: VariantState, plan: Plan, anchor: AnalyzerResult | None, votes: Sequence[Vote]
) -> Decision:
    target = plan.targets[s.name]
    detail = "; ".join(_reading(v.result, s.role) + ("" if v.live else " (stale)") for v in votes if v.enabled)
    vc = next((v for v in anchor.variants if v.name == s.name), None) if anchor is not None else None
    signals = None
    if anchor is not None and vc is not None:
        required, spare = anchor.signals(s.role)
        signals = Signals(
            utilization=vc.utilization,
            required=required,
            spare=spare,
            unit="continuous",
            tokens_used=sum(r.tokens_in_use for r in s.replicas),
            tokens_capacity=sum(r.tokens_capacity for r in s.replicas),
        )
    if plan.held:
        return Decision(
            m.spec.key,
            s.current,
            target,
            Reason.NO_METRICS,
            "no analyzer could size replicas; keeping the current size",
        )
    if target > s.current:
        if s.pending > s.coming:
            why = (
                f"{s.pending - s.coming} replica(s) still not Ready after {m.pending.oldest_age:.0f}s "
                "(past the pending timeout) are not counted as supply; "
            )
            return Decision(m.spec.key, s.current, target, Reason.TIMEOUT, why + detail, signals)
        return Decision(m.spec.key, s.current, target, Reason.SATURATED, detail, signals)
    if target < s.current:
        return Decision(m.spec.key, s.current, target, Reason.SCALE_DOWN, detail, signals)
    high = m.spec.max_replicas
    if plan.need.get(s.role, 0) > 0 and high is not None and s.current >= high:
        return Decision(m.spec.key, s.current, target, Reason.LIMIT, f"at maxReplicas {high}; {detail}", signals)
    if s.coming and anchor is not None and plan.need.get(s.role, 0) <= 0:
        demand, ready_supply = anchor.totals(s.role)
        if demand / anchor.scale_up > ready_supply:
            return Decision(
                m.spec.key, s.current, target, Reason.PENDING,
                f"{s.coming} replica(s) not Ready yet (oldest {m.pending.oldest_age:.0f}s) cover the required "
                f"capacity; {detail}",
                signals,
            )  # fmt: skip
    vetoed = plan.vetoed_by.get(s.role)
    if vetoed and any(v.result.signals(s.role)[1] > 0 for v in votes if v.enabled):
        detail = f"scale-down vetoed by {', '.join(vetoed)}; {detail}"
    return Decision(m.spec.key, s.current, target, Reason.STEADY, detail, signals)


def _enforce(members: Sequence[Member], decisions: list[Decision], idle: str) -> list[Decision]:
    by_key = {m.spec.key: m for m in members}
    out: list[Decision] = []
    for d in decisions:
        m = by_key[d.variant]
        if idle:
            d = replace(d, target=m.spec.min_replicas, reason=Reason.IDLE, message=idle)
        high = m.spec.max_replicas
        if high is not None and d.target > high:
            d = replace(d, target=high, reason=Reason.LIMIT, message=f"above maxReplicas {high}")
        elif d.target < m.spec.min_replicas:
            d = replace(
                d, target=m.spec.min_replicas, reason=Reason.LIMIT, message=f"below minReplicas {m.spec.min_replicas}"
            )
        out.append(d)
    return out
