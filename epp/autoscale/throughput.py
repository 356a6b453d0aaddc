"""The throughput analyzer (upstream #1250, #1480): decode tokens per second, supply against demand.

Opt-in (``analyzers: [..., {name: throughput}]``). Per variant it learns how inter-token latency
grows with KV use, ``ITL(k) = A·k + B``: an ordinary least-squares fit once its window holds 10
observations ``(k, ITL)`` with k in [0.15, 0.85] spanning at least 0.30 (tier 1), else A fitted
with B pinned to the last fitted B or 6 ms (tier 2); a fit needs A > 0 and ITL(0.85) > 0. The
window keeps 20 observations for 30 minutes and is cleared when the workload shape moves more
than 20% (average prompt or output tokens) or the model's prediction disagrees with the observed
token rate by more than 15% (at k ≥ 0.30) three cycles running.

Supply per instance, at the saturation operating point k_sat = 0.85: ``k_sat · KV capacity /
KVreq / ITL(k_sat)`` tokens per second, with ``KVreq = prompt·(1 − prefix hits) + output/2``.
Demand is the model's: arrivals (the picker's successful scheduling rate) × the replica-weighted
average output length of the non-prefill variants, plus the picker's queue drained within twice
the ITL at k_sat; split evenly over the non-prefill roles. Per-variant demand (completed requests ×
output, else the tokens k* implies) is reported but does not drive scaling. A variant with no
instance keeps its last per-replica supply. State is in memory: after a restart the analyzer warms
up again while the saturation analyzer covers.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.autoscale.capacity import VariantState
from epp.autoscale.inputs import ModelSignals
from epp.autoscale.results import AnalyzerResult, VariantCapacity, by_role
from epp.autoscale.types import ROLE_PREFILL, ModelKey, ReplicaMetrics

__all__ = ["K_SAT", "ThroughputAnalyzer", "fit_itl"]

log = logging.getLogger(__name__)

K_SAT = 0.85
BASELINE_ITL = 0.006
WINDOW_SIZE, WINDOW_AGE, MIN_SAMPLES, MIN_SPREAD = 20, 1800.0, 10, 0.30
MIN_K, MAX_K = 0.15, 0.85
SHAPE_TOLERANCE = 0.20
QUEUE_DRAIN = 2.0
MIN_DECODE_OUTPUT = 20.0
GPS_PCT, GPS_MIN_K, GPS_CLEAR = 15.0, 0.30, 3


def _valid(a: float, b: float) -> bool:
    return math.isfinite(a) and math.isfinite(b) and a > 1e-12 and a * K_SAT + b > 0


def fit_itl(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """OLS ``(A, B)`` of ITL = A·k + B over ``(k, itl)`` points, when it is a valid model."""
    n = len(points)
    if n < 2:
        return None
    sk, si = sum(k for k, _ in points), sum(i for _, i in points)
    skk, ski = sum(k * k for k, _ in points), sum(k * i for k, i in points)
    denom = n * skk - sk * sk
    if abs(denom) < 1e-12:
        return None
    a = (n * ski - sk * si) / denom
    b = (si - a * sk) / n
    return (a, b) if _valid(a, b) else None


@dataclass(slots=True)
class _Shape:
    avg_in: float
    avg_out: float
    hit: float

    @property
    def kv_req(self) -> float:
        return self.avg_in * (1 - self.hit) + self.avg_out / 2

    def moved(self, other: _Shape) -> bool:
        def far(a: float, b: float) -> bool:
            return a != 0 if b == 0 else abs(a - b) / b > SHAPE_TOLERANCE

        return far(self.avg_in, other.avg_in) or far(self.avg_out, other.avg_out)


@dataclass(slots=True)
class _State:
    role: str
    shape: _Shape | None = None
    window: deque[tuple[float, float, float]] = field(default_factory=lambda: deque(maxlen=WINDOW_SIZE))
    fitted_b: float | None = None
    mismatches: int = 0
    per_replica: float = 0.0
    seen: float = 0.0


def _healthy(r: ReplicaMetrics) -> bool:
    return (
        r.tokens_capacity > 0
        and 0 <= r.k_now <= 1
        and r.avg_itl > 0
        and r.avg_input_tokens > 1
        and r.avg_output_tokens > 1
    )


def _shape(readings: Sequence[ReplicaMetrics]) -> _Shape:
    weight = sum(r.request_rate for r in readings)
    if weight > 0:
        return _Shape(
            sum(r.request_rate * r.avg_input_tokens for r in readings) / weight,
            sum(r.request_rate * r.avg_output_tokens for r in readings) / weight,
            min(1.0, max(0.0, sum(r.request_rate * r.prefix_hit_rate for r in readings) / weight)),
        )
    n = len(readings)
    return _Shape(
        sum(r.avg_input_tokens for r in readings) / n,
        sum(r.avg_output_tokens for r in readings) / n,
        min(1.0, max(0.0, sum(r.prefix_hit_rate for r in readings) / n)),
    )


class ThroughputAnalyzer:
    """Stateful across cycles: each variant's shape, observations and last fit."""

    name = "throughput"

    def __init__(self) -> None:
        self._states: dict[tuple[str, str, str], _State] = {}

    def _model(self, state: _State, healthy: Sequence[ReplicaMetrics]) -> tuple[float, float, str] | None:
        """``(A, B, tier)``: the OLS fit once the window is ready, else A with B pinned."""
        points = [(k, itl) for k, itl, _ in state.window]
        ready = len(points) >= MIN_SAMPLES and max(k for k, _ in points) - min(k for k, _ in points) >= MIN_SPREAD
        if ready and (fit := fit_itl(points)) is not None:
            state.fitted_b = fit[1]
            return fit[0], fit[1], "T1-ols"
        b = BASELINE_ITL if state.fitted_b is None else state.fitted_b
        num = sum((r.avg_itl - b) * r.k_now for r in healthy if r.k_now > 0)
        den = sum(r.k_now * r.k_now for r in healthy if r.k_now > 0)
        if den > 0 and _valid(num / den, b):
            return num / den, b, "T2-default" if state.fitted_b is None else "T2-pinned"
        return None

    def _observe(self, state: _State, healthy: Sequence[ReplicaMetrics], now: float) -> None:
        shape = _shape(healthy)
        if state.shape is not None and shape.moved(state.shape):
            state.window.clear()
            state.mismatches = 0
        state.shape = shape
        for r in healthy:
            if MIN_K <= r.k_now <= MAX_K:
                state.window.append((r.k_now, r.avg_itl, now))
        while state.window and state.window[0][2] < now - WINDOW_AGE:
            state.window.popleft()

    def _gps_mismatch(self, healthy: Sequence[ReplicaMetrics], shape: _Shape, a: float, b: float) -> bool:
        for r in healthy:
            if r.generation_rate <= 0 or r.k_now < GPS_MIN_K or a * r.k_now + b <= 0:
                continue
            predicted = r.k_now * r.tokens_capacity / shape.kv_req / (a * r.k_now + b)
            if abs(predicted - r.generation_rate) / r.generation_rate * 100 > GPS_PCT:
                return True
        return False

    def analyze(
        self, model: ModelKey, variants: Sequence[VariantState], signals: ModelSignals | None, now: float
    ) -> AnalyzerResult:
        out: list[VariantCapacity] = []
        decode_itl: list[float] = []
        decode_out = decode_n = 0.0
        for v in variants:
            key = (model.namespace, model.model_id, v.name)
            state = self._states.setdefault(key, _State(v.role))
            state.role = v.role
            healthy = [r for r in v.replicas if _healthy(r)]
            if healthy:
                state.seen = now
                self._observe(state, healthy, now)
            fit = self._model(state, healthy) if healthy and state.shape and state.shape.kv_req > 0 else None
            if fit is None or state.shape is None:
                if not v.replicas and state.per_replica > 0:
                    out.append(
                        VariantCapacity(
                            v.name, v.role, v.cost, v.accelerator, 0, v.coming, state.per_replica, 0.0, "T-sfz"
                        )
                    )
                continue
            a, b, reason = fit
            itl_sat = a * K_SAT + b
            with_kv = [r for r in v.replicas if r.tokens_capacity > 0]
            supply = sum(K_SAT * r.tokens_capacity / state.shape.kv_req / itl_sat for r in with_kv)
            if supply <= 0:
                continue
            state.per_replica = supply / len(with_kv)
            if self._gps_mismatch(healthy, state.shape, a, b):
                state.mismatches += 1
                log.info("throughput analyzer: token rate disagrees with the ITL model", extra={"variant": v.name})
                if state.mismatches >= GPS_CLEAR:
                    state.window.clear()
                    state.mismatches = 0
            else:
                state.mismatches = 0
            demand = sum(r.request_rate * r.avg_output_tokens for r in v.replicas)
            if demand == 0 and state.shape.avg_out > MIN_DECODE_OUTPUT:
                demand = sum(
                    r.k_now * r.tokens_capacity / state.shape.kv_req / (a * r.k_now + b)
                    for r in with_kv
                    if 0 < r.k_now <= 1 and a * r.k_now + b > 0
                )
            if v.role != ROLE_PREFILL:
                decode_itl.append(itl_sat)
                decode_out += len(with_kv) * state.shape.avg_out
                decode_n += len(with_kv)
            out.append(
                VariantCapacity(
                    v.name, v.role, v.cost, v.accelerator, len(with_kv), v.coming, state.per_replica, demand, reason
                )
            )
        demand = 0.0
        shares: dict[str, float] = {}
        if decode_n > 0 and signals is not None:
            arrival = signals.arrival_rate * decode_out / decode_n
            queue = (
                signals.queue_size / (QUEUE_DRAIN * (sum(decode_itl) / len(decode_itl)))
                if signals.queue_size > 0
                else 0.0
            )
            demand = arrival + queue
            roles = {v.role for v in out if v.role != ROLE_PREFILL}
            shares = {role: demand / len(roles) for role in roles} if roles and demand else {}
        for key in [k for k, s in self._states.items() if now - s.seen > 2 * WINDOW_AGE and s.seen]:
            del self._states[key]
        return AnalyzerResult(
            analyzer=self.name,
            variants=tuple(out),
            supply=sum(v.capacity for v in out),
            anticipated=sum((v.replica_count + v.pending) * v.per_replica for v in out),
            demand=demand,
            roles=by_role(out, shares, own_demand=False),
        )

    def retain(self, models: set[ModelKey]) -> None:
        for key in [k for k in self._states if ModelKey(k[0], k[1]) not in models]:
            del self._states[key]
