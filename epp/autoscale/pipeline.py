"""The multi-analyzer pipeline (upstream #1225, #1481) and its cost-aware optimizer.

Every enabled analyzer's calibrated result is a vote. **Scale-up** when any voter needs capacity
(any-up): per role, the variant with the lowest cost per unit of capacity takes as many replicas
as the neediest voter asks for (``ceil(required / its per-replica capacity)``), up to its maximum;
the roles of a disaggregated model commit together (upstream's joint step: a role its maximum
holds back holds the others to the same fraction of what they need, in replicas), and each
voter's need shrinks by the capacity committed, in its own unit. **Scale-down**
only when every *live* voter has spare capacity for the role (all-down): the most expensive
variant first (ties: lower score-weighted capacity, then name) gives back the fewest replicas any
live voter can spare, never below its minimum, and the cheapest variant keeps one replica while no
more expensive one has any. Never both in one cycle.

An analyzer is live while its last informative result (some variant with a capacity) is at most
three cycles old; a voter that is not live neither vetoes nor sizes a scale-down (#1481), and with
no live voter nothing is given back. The saturation analyzer always runs, as the carrier of each
variant's cost, accelerator, role and replica counts; it votes unless an explicit list disables it.
Which analyzer sizes the replicas (the *binding* one): saturation when it votes and is live, else
the only other live voter; with two other live voters and saturation silent, the model holds.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from epp.autoscale.capacity import VariantState
from epp.autoscale.results import AnalyzerResult, VariantCapacity, informative
from epp.autoscale.types import ROLE_BOTH, ModelKey

__all__ = ["LIVENESS_CYCLES", "Liveness", "Plan", "Vote", "binding", "optimize"]

LIVENESS_CYCLES = 3
_MAX_ROUNDS = 10_000


@dataclass(slots=True)
class Vote:
    """One analyzer's calibrated result in this cycle's ballot."""

    name: str
    result: AnalyzerResult
    score: float = 1.0
    enabled: bool = True
    live: bool = True


class Liveness:
    """When each analyzer last had something to say about each model (on the controller's clock)."""

    def __init__(self, interval: float) -> None:
        self._stale = LIVENESS_CYCLES * max(interval, 1e-9)
        self._last: dict[ModelKey, dict[str, float]] = {}

    def mark(self, model: ModelKey, votes: Sequence[Vote], now: float) -> None:
        seen = self._last.setdefault(model, {})
        for v in votes:
            if informative(v.result):
                seen[v.name] = now
            v.live = v.name in seen and now - seen[v.name] <= self._stale

    def retain(self, models: set[ModelKey]) -> None:
        if models:  # an empty cycle (nothing discovered yet) keeps what was learned
            for model in [m for m in self._last if m not in models]:
                del self._last[model]


def binding(votes: Sequence[Vote]) -> Vote | None:
    """The analyzer whose capacities size the replicas this cycle, or None (hold)."""
    sat = next((v for v in votes if v.result.analyzer == "saturation"), None)
    if sat is not None and sat.enabled and sat.live and informative(sat.result):
        return sat
    others = [v for v in votes if v is not sat and v.enabled and v.live and informative(v.result)]
    return others[0] if len(others) == 1 else None


@dataclass(slots=True)
class Plan:
    """The optimizer's targets, and why per role: scaled up, covered by pending, vetoed, spare."""

    targets: dict[str, int]
    held: bool = False
    """No analyzer could size replicas: everything stays where it is."""
    vetoed_by: dict[str, list[str]] = field(default_factory=dict)
    """role → live voters without spare capacity (scale-down refused)."""
    need: dict[str, float] = field(default_factory=dict)
    """role → the largest required capacity among voters (binding analyzer's units)."""


def _roles(variants: Sequence[VariantCapacity]) -> list[str]:
    return sorted({v.role for v in variants}) or [ROLE_BOTH]


def _pick(
    role: str, anchor: Sequence[VariantCapacity], targets: Mapping[str, int], bounds: Bounds
) -> tuple[str, float] | None:
    for v in sorted(
        (v for v in anchor if v.role == role and v.per_replica > 0), key=lambda v: (v.cost / v.per_replica, v.name)
    ):
        high = bounds[v.name][1]
        if high is None:
            return v.name, math.inf
        if high - targets[v.name] > 0:
            return v.name, float(high - targets[v.name])
    return None


Bounds = Mapping[str, tuple[int, int | None]]


def _scale_up(
    votes: Sequence[Vote], anchor: Sequence[VariantCapacity], targets: dict[str, int], bounds: Bounds,
    need: list[dict[str, float]],
) -> None:  # fmt: skip
    roles = _roles(anchor)
    for _ in range(_MAX_ROUNDS):
        if not any(n[r] > 0 for n in need for r in roles):
            return
        picks: dict[str, tuple[str, float]] = {}
        for role in roles:
            pick = _pick(role, anchor, targets, bounds)
            if pick is None:
                return  # a role with no variant left to grow: the model cannot commit jointly
            picks[role] = pick
        sized: dict[str, tuple[int, int]] = {}  # role → (replicas it may take, replicas it needs)
        for role, (name, cap) in picks.items():
            wanted = max(
                (math.ceil(need[i][role] / p) for i, v in enumerate(votes) if (p := v.result.per_replica(name)) > 0),
                default=0,
            )
            sized[role] = (int(min(wanted, cap)), wanted)
        # roles commit together: a role held back by its cap holds the others to the same fraction
        delta = min((n / wanted for n, wanted in sized.values() if wanted > 0), default=0.0)
        if delta <= 0:
            return
        committed = False
        for role, (n, wanted) in sized.items():
            k = max(math.floor(delta * wanted), min(1, n)) if wanted > 0 else 0
            if k <= 0:
                continue
            name = picks[role][0]
            targets[name] += k
            committed = True
            for i, v in enumerate(votes):
                need[i][role] = max(0.0, need[i][role] - k * v.result.per_replica(name))
        if not committed:
            return


def _scale_down(
    votes: Sequence[Vote], anchor: Sequence[VariantCapacity], targets: dict[str, int], bounds: Bounds,
    spare: list[dict[str, float]], plan: Plan,
) -> None:  # fmt: skip
    live = [i for i, v in enumerate(votes) if v.live]
    for role in _roles(anchor):
        against = [votes[i].name for i in live if spare[i][role] <= 0]
        if against or not live:
            plan.vetoed_by[role] = against or ["no live analyzer"]
            continue

        def weighted(name: str) -> float:
            return sum(v.score * v.result.per_replica(name) for v in votes)

        ordered = sorted((v for v in anchor if v.role == role), key=lambda v: (-v.cost, weighted(v.name), v.name))
        for pos, v in enumerate(ordered):
            if v.per_replica <= 0:
                continue
            removable = targets[v.name] - bounds[v.name][0]
            if removable <= 0:
                continue
            sizes = [math.floor(spare[i][role] / p) for i in live if (p := votes[i].result.per_replica(v.name)) > 0]
            n = min(min(sizes, default=0), removable)
            last = pos == len(ordered) - 1
            if last and targets[v.name] - n < 1 and not any(targets[o.name] > 0 for o in ordered[:pos]):
                n = targets[v.name] - 1  # the cheapest keeps one while no costlier variant has any
            if n <= 0:
                continue
            targets[v.name] -= n
            for i in live:
                spare[i][role] = max(0.0, spare[i][role] - n * votes[i].result.per_replica(v.name))


def optimize(
    votes: Sequence[Vote], states: Sequence[VariantState], bounds: Mapping[str, tuple[int, int | None]]
) -> Plan:
    """Targets for every variant of one model (``bounds``: name → (minimum, maximum or None))."""
    plan = Plan(targets={s.name: s.current for s in states})
    anchor_vote = binding(votes)
    if anchor_vote is None:
        plan.held = True
        return plan
    carrier = next((v for v in votes if v.result.analyzer == "saturation"), anchor_vote)
    sized = {v.name: v for v in anchor_vote.result.variants}
    anchor = [
        VariantCapacity(
            c.name, c.role, c.cost, c.accelerator, c.replica_count, c.pending,
            sized[c.name].per_replica if c.name in sized else (c.per_replica if carrier.enabled else 0.0),
        )
        for c in carrier.result.variants
    ]  # fmt: skip
    voting = [v for v in votes if v.enabled]
    roles = _roles(anchor)
    need = [{r: v.result.signals(r)[0] for r in roles} for v in voting]
    spare = [{r: v.result.signals(r)[1] for r in roles} for v in voting]
    plan.need = {r: max((n[r] for n in need), default=0.0) for r in roles}
    if any(n[r] > 0 for n in need for r in roles):
        _scale_up(voting, anchor, plan.targets, bounds, need)
    else:
        _scale_down(voting, anchor, plan.targets, bounds, spare, plan)
    return plan
