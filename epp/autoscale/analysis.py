"""The V1 saturation decision for one model group (or one P/D role of it). Pure: no I/O, no clock.

Deprecated upstream (#1441) but still selectable: a ConfigMap without ``analyzers``. Upstream WVA's
V1 analyzer (``internal/saturation/analyzer.go``) with PR #549's per-variant pending skip, plus our
extensions: a pending timeout (decided in :mod:`epp.autoscale.pending`,
seen here as ``blocking_pending``), min/max replicas, and a reason on every decision.

- A replica is saturated at ``kv >= kvCacheThreshold`` or ``queue >= queueLengthThreshold``.
- Spare capacity is averaged over the non-saturated replicas of the whole group (0 if none).
- Scale up when either average spare is strictly below its trigger: +1 to the cheapest variant
  that is not pending, held or at its maximum (tie: name ascending).
- Otherwise scale down when at least two replicas are non-saturated and the same load spread over
  N−1 of them still leaves both spares at or above the triggers: −1 from the most expensive
  variant above its floor (tie: name descending).
- At most one replica per group per cycle; min/max corrections take the cycle's move.

Spare values are rounded to 1e-9 before comparison so that "exactly at the trigger" means what it
says (upstream compares raw floats, so 0.9 − 0.8 < 0.1 there).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.autoscale.decision import Decision, Reason, Signals
from epp.autoscale.saturation_config import SaturationConfig
from epp.autoscale.types import ReplicaMetrics, VariantKey

__all__ = ["Saturation", "VariantInput", "analyze_saturation", "decide"]

MIN_NON_SATURATED_FOR_SCALE_DOWN = 2
_PRECISION = 9


@dataclass(frozen=True, slots=True)
class VariantInput:
    """What the decision needs to know about one variant of the group."""

    key: VariantKey
    cost: float
    current: int
    replicas: tuple[ReplicaMetrics, ...] = ()
    pending: int = 0
    blocking_pending: int = 0  # pending replicas younger than the pending timeout
    oldest_pending_age: float = 0.0
    held_at: int | None = None  # previous target not yet reached and not timed out
    min_replicas: int = 1
    max_replicas: int | None = None


@dataclass(frozen=True, slots=True)
class Saturation:
    """The group-level reading behind a decision."""

    replicas: int = 0
    non_saturated: int = 0
    avg_spare_kv: float = 0.0
    avg_spare_queue: float = 0.0
    scale_up: bool = False
    scale_down_safe: bool = False
    why: str = field(default="", compare=False)


def _r(x: float) -> float:
    return round(x, _PRECISION)


def analyze_saturation(replicas: Sequence[ReplicaMetrics], cfg: SaturationConfig) -> Saturation:
    """Classify replicas, average the spare of the non-saturated ones, evaluate both signals."""
    if not replicas:
        return Saturation(why="no replica metrics")
    spare_kv: list[float] = []
    spare_q: list[float] = []
    for r in replicas:
        if _saturated(r, cfg):
            continue
        spare_kv.append(cfg.kv_cache_threshold - r.kv_cache_usage)
        spare_q.append(cfg.queue_length_threshold - r.queue_length)
    n = len(spare_kv)
    avg_kv = _r(sum(spare_kv) / n) if n else 0.0
    avg_q = _r(sum(spare_q) / n) if n else 0.0
    kv_low = avg_kv < cfg.kv_spare_trigger
    q_low = avg_q < cfg.queue_spare_trigger
    spares = (
        f"avg spare kv {avg_kv:.3f} (trigger {cfg.kv_spare_trigger:g}), "
        f"queue {avg_q:.2f} (trigger {cfg.queue_spare_trigger:g})"
    )
    summary = f"{len(replicas) - n}/{len(replicas)} replicas saturated; {spares}"
    if kv_low or q_low:
        which = "kv and queue" if kv_low and q_low else "kv" if kv_low else "queue"
        return Saturation(len(replicas), n, avg_kv, avg_q, scale_up=True, why=f"{which} spare below trigger: {summary}")
    safe = False
    if n >= MIN_NON_SATURATED_FOR_SCALE_DOWN:
        grow = n / (n - 1)
        after_kv = _r(cfg.kv_cache_threshold - (cfg.kv_cache_threshold - avg_kv) * grow)
        after_q = _r(cfg.queue_length_threshold - (cfg.queue_length_threshold - avg_q) * grow)
        safe = after_kv >= cfg.kv_spare_trigger and after_q >= cfg.queue_spare_trigger
    return Saturation(len(replicas), n, avg_kv, avg_q, scale_down_safe=safe, why=summary)


@dataclass(slots=True)
class _Slot:
    v: VariantInput
    target: int
    reason: Reason
    message: str

    @property
    def floor(self) -> int:
        return max(1, self.v.min_replicas)

    @property
    def at_max(self) -> bool:
        return self.v.max_replicas is not None and self.target >= self.v.max_replicas


def decide(variants: Sequence[VariantInput], cfg: SaturationConfig, *, idle: str = "") -> list[Decision]:
    """Targets for every variant of one group (sorted by key). ``idle`` (a message) = scale to zero."""
    slots = [_base(v) for v in sorted(variants, key=lambda v: v.key)]
    corrected = any(s.reason is Reason.LIMIT for s in slots)
    sat = analyze_saturation([r for s in slots for r in s.v.replicas], cfg)
    if idle:
        for s in slots:
            s.target, s.reason, s.message = s.v.min_replicas, Reason.IDLE, idle
    elif not corrected:
        _step(slots, sat)
    return [Decision(s.v.key, s.v.current, s.target, s.reason, s.message, _signals(s.v, sat, cfg)) for s in slots]


def _signals(v: VariantInput, sat: Saturation, cfg: SaturationConfig) -> Signals | None:
    """Upstream's V1 gauges: mean KV use of the variant, its average spare KV, a 0/1 scale-up signal."""
    if not v.replicas:
        return None
    kv = [r.kv_cache_usage for r in v.replicas]
    spare = [cfg.kv_cache_threshold - k for r, k in zip(v.replicas, kv, strict=True) if not _saturated(r, cfg)]
    return Signals(
        utilization=sum(kv) / len(kv),
        required=1.0 if sat.scale_up else 0.0,
        spare=_r(sum(spare) / len(spare)) if spare else 0.0,
        unit="binary",
        tokens_used=sum(r.tokens_in_use for r in v.replicas),
        tokens_capacity=sum(r.tokens_capacity for r in v.replicas),
    )


def _saturated(r: ReplicaMetrics, cfg: SaturationConfig) -> bool:
    return r.kv_cache_usage >= cfg.kv_cache_threshold or r.queue_length >= cfg.queue_length_threshold


def _base(v: VariantInput) -> _Slot:
    if v.held_at is not None:
        slot = _Slot(v, v.held_at, Reason.COOLDOWN, f"waiting for the Deployment to reach {v.held_at} (at {v.current})")
    else:
        slot = _Slot(v, v.current, Reason.STEADY, "")
    if v.max_replicas is not None and slot.target > v.max_replicas:
        slot.target, slot.reason, slot.message = v.max_replicas, Reason.LIMIT, f"above maxReplicas {v.max_replicas}"
    elif slot.target < v.min_replicas:
        slot.target, slot.reason, slot.message = v.min_replicas, Reason.LIMIT, f"below minReplicas {v.min_replicas}"
    return slot


def _step(slots: list[_Slot], sat: Saturation) -> None:
    free = [s for s in slots if s.reason is not Reason.COOLDOWN]
    if sat.replicas == 0:
        for s in free:
            s.reason, s.message = Reason.NO_METRICS, "no Ready replica reported metrics; keeping the current size"
        return
    for s in free:
        s.message = sat.why
    if sat.scale_up:
        movable = []
        for s in free:
            if s.at_max:
                s.reason, s.message = Reason.LIMIT, f"at maxReplicas {s.v.max_replicas}; {sat.why}"
            elif s.v.blocking_pending:
                s.reason = Reason.PENDING
                s.message = (
                    f"{s.v.blocking_pending} replica(s) not Ready yet (oldest {s.v.oldest_pending_age:.0f}s); "
                    f"no scale-up until they are Ready or time out; {sat.why}"
                )
            else:
                movable.append(s)
        if movable:
            pick = min(movable, key=lambda s: (s.v.cost, s.v.key.name))
            pick.target += 1
            if pick.v.pending:
                pick.reason = Reason.TIMEOUT
                pick.message = (
                    f"{pick.v.pending} replica(s) still not Ready after {pick.v.oldest_pending_age:.0f}s "
                    f"(past the pending timeout), scaling up anyway; {sat.why}"
                )
            else:
                pick.reason = Reason.SATURATED
            for s in movable:
                if s is not pick:
                    s.message = f"{pick.v.key.name} (cost {pick.v.cost:g}) took this cycle's +1; {sat.why}"
    elif sat.scale_down_safe:
        movable = [s for s in free if s.target > s.floor]
        for s in free:
            if s.target <= s.floor and s.v.min_replicas > 1:
                s.reason, s.message = Reason.LIMIT, f"at minReplicas {s.v.min_replicas}; {sat.why}"
        if movable:
            pick = max(movable, key=lambda s: (s.v.cost, s.v.key.name))
            pick.target -= 1
            pick.reason = Reason.SCALE_DOWN
            pick.message = f"load fits on one replica fewer; {sat.why}"
