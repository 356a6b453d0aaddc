"""The V2 saturation analyzer (upstream ``saturation_v2``, the default since v0.9): token capacity per replica.

Per instance with a known KV capacity (``tokens_capacity``):

- demand = tokens in use + waiting requests × their footprint (prompt tokens for a ``prefill``
  replica; prompt + output tokens otherwise — the peak a decode request grows to);
- k1 (memory-bound) = capacity × ``kvCacheThreshold``;
- k2 (compute-bound), the first that applies: the tokens in use when the queue is at
  ``queueLengthThreshold`` (observed; recorded in a rolling average of 10 per
  model|accelerator|GPUs|output-length bucket), that average, the estimate from the engine's
  arguments ``min(B·O/(I+O), S)·(I+O/2)`` (B batched tokens, S max sequences, I/O average prompt
  and output tokens), else k1;
- capacity = min(k1, k2). Without a KV capacity, the engine's arguments stand in (upstream's
  fallback for servers without ``vllm:cache_config_info``): capacity = the recorded capacity ×
  ``kvCacheThreshold``, demand = KV use × that.

Per variant: the median instance capacity; the instance count (a data-parallel pod counts each
rank) and pending replicas converted to instances by the same ratio. A variant with no instance
reporting uses its last live capacity, else one of the same model, accelerator, GPUs and arguments,
else the estimate from its arguments. Per model: the sums, plus the picker's flow-control queue as
demand (prompt tokens from bytes/4 or count × average, less the prefix-cache hits, plus output
tokens; attributed by role). The engine's post-step (:func:`~epp.autoscale.results.calibrate`) turns
that into required and spare capacity.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.autoscale.engine_args import EngineParams
from epp.autoscale.inputs import ModelSignals
from epp.autoscale.results import NO_DATA, AnalyzerResult, VariantCapacity, by_role
from epp.autoscale.saturation_config import SaturationConfig
from epp.autoscale.types import ROLE_BOTH, ROLE_DECODE, ROLE_PREFILL, ModelKey, ReplicaMetrics

__all__ = ["BYTES_PER_TOKEN", "CapacityAnalyzer", "VariantState"]

BYTES_PER_TOKEN = 4
HISTORY = 10
_SHORT, _MEDIUM = 100, 500


@dataclass(frozen=True, slots=True)
class VariantState:
    """One variant's replicas and workload, as every V2-pipeline analyzer takes it."""

    name: str
    role: str = ROLE_BOTH
    cost: float = 10.0
    accelerator: str = ""
    gpus_per_replica: int = 1
    current: int = 0
    pending: int = 0
    """Replicas not Ready yet (``current − ready``)."""
    coming: int = 0
    """Of those, the ones still counted as supply on the way (younger than the pending timeout)."""
    params: EngineParams = field(default_factory=EngineParams)
    replicas: tuple[ReplicaMetrics, ...] = ()

    @property
    def ready(self) -> int:
        return max(0, self.current - self.pending)


@dataclass(slots=True)
class _Record:
    capacity: float
    accelerator: str
    gpus: int
    params: EngineParams


def _bucket(avg_output: float) -> str:
    return "short" if avg_output < _SHORT else "medium" if avg_output < _MEDIUM else "long"


def _derived(params: EngineParams, avg_in: float, avg_out: float) -> int:
    """Upstream's ``estimateCapacityFromParams``: steady-state tokens the batch can hold."""
    if params.effective_batched_tokens <= 0 or avg_out <= 0:
        return 0
    steady = min(params.effective_batched_tokens * avg_out / (avg_in + avg_out), float(params.max_num_seqs))
    return max(0, int(steady * (avg_in + avg_out / 2)))


def _waiting(r: ReplicaMetrics, role: str) -> int:
    if r.queue_length <= 0:
        return 0
    per_request = r.avg_input_tokens + (0.0 if role == ROLE_PREFILL else r.avg_output_tokens)
    demand = r.queue_length * per_request
    return int(demand) if 0 < demand < 2**63 else 0


class CapacityAnalyzer:
    """Stateful across cycles: the k2 history and each variant's last live capacity."""

    name = "saturation"

    def __init__(self) -> None:
        self._history: dict[tuple[str, ...], deque[float]] = {}
        self._live: dict[tuple[str, str, str], _Record] = {}

    def _k2(self, model: ModelKey, v: VariantState, r: ReplicaMetrics, cfg: SaturationConfig, k1: int) -> int:
        key = (model.namespace, model.model_id, v.accelerator, str(v.gpus_per_replica), _bucket(r.avg_output_tokens))
        if r.queue_length >= int(cfg.queue_length_threshold) and r.tokens_in_use > 0:
            self._history.setdefault(key, deque(maxlen=HISTORY)).append(float(r.tokens_in_use))
            return r.tokens_in_use
        if history := self._history.get(key):
            return int(sum(history) / len(history))
        return _derived(v.params, r.avg_input_tokens, r.avg_output_tokens) or k1

    def _instance(self, model: ModelKey, v: VariantState, r: ReplicaMetrics, cfg: SaturationConfig) -> tuple[int, int]:
        """``(capacity, demand)`` of one instance; capacity 0: nothing to go on."""
        if r.tokens_capacity > 0:
            k1 = int(r.tokens_capacity * cfg.kv_cache_threshold)
            capacity = min(k1, self._k2(model, v, r, cfg, k1))
            return capacity, r.tokens_in_use + _waiting(r, v.role)
        record = self._live.get((model.namespace, model.model_id, v.name))
        base = record.capacity if record is not None else float(v.params.kv_tokens or v.params.effective_batched_tokens)
        capacity = int(base * cfg.kv_cache_threshold)
        if capacity <= 0:
            return 0, 0
        return capacity, int(r.kv_cache_usage * capacity) + _waiting(r, v.role)

    def _stored(self, model: ModelKey, v: VariantState, cfg: SaturationConfig, shape: tuple[float, float]) -> float:
        """A capacity for a variant without a reporting instance (0: unknown)."""
        own = self._live.get((model.namespace, model.model_id, v.name))
        if own is not None:
            return own.capacity
        for (ns, m, _), rec in sorted(self._live.items()):
            if (ns, m) == (model.namespace, model.model_id) and (rec.accelerator, rec.gpus, rec.params) == (
                v.accelerator,
                v.gpus_per_replica,
                v.params,
            ):
                return rec.capacity
        estimate = float(_derived(v.params, *shape) or v.params.effective_batched_tokens)
        if v.params.kv_tokens:
            estimate = min(estimate, v.params.kv_tokens * cfg.kv_cache_threshold)
        return estimate

    def analyze(
        self,
        model: ModelKey,
        variants: Sequence[VariantState],
        cfg: SaturationConfig,
        signals: ModelSignals | None = None,
    ) -> AnalyzerResult:
        readings = [r for v in variants for r in v.replicas]
        shaped = [r for r in readings if r.avg_input_tokens > 0 or r.avg_output_tokens > 0]
        avg_in = statistics.fmean(r.avg_input_tokens for r in shaped) if shaped else 0.0
        avg_out = statistics.fmean(r.avg_output_tokens for r in shaped) if shaped else 0.0
        hit = statistics.fmean(r.prefix_hit_rate for r in shaped) if shaped else 0.0
        out: list[VariantCapacity] = []
        for v in variants:
            pairs = [p for p in (self._instance(model, v, r, cfg) for r in v.replicas) if p[0] > 0]
            count, coming, reason = v.ready, v.coming, ""
            if pairs:
                per_replica = float(statistics.median(c for c, _ in pairs))
                count = len(pairs)
                if v.ready > 0 and count // v.ready > 1:
                    coming *= count // v.ready  # pending units → instances (data-parallel ranks)
                demand = float(sum(d for _, d in pairs))
                self._live[(model.namespace, model.model_id, v.name)] = _Record(
                    per_replica, v.accelerator, v.gpus_per_replica, v.params
                )
            else:
                per_replica, demand, reason = self._stored(model, v, cfg, (avg_in, avg_out)), 0.0, "stored"
                if per_replica <= 0:
                    reason = NO_DATA
            out.append(
                VariantCapacity(v.name, v.role, v.cost, v.accelerator, count, coming, per_replica, demand, reason)
            )
        queue_total, queue_by_role = _queue_demand(signals, (avg_in, avg_out, hit), {v.role for v in out})
        return AnalyzerResult(
            analyzer=self.name,
            variants=tuple(out),
            supply=sum(v.capacity for v in out),
            anticipated=sum((v.replica_count + v.pending) * v.per_replica for v in out),
            demand=sum(v.demand for v in out) + queue_total,
            roles=by_role(out, queue_by_role),
        )

    def retain(self, models: set[ModelKey]) -> None:
        """Forget the records of models that are gone."""
        for key in [k for k in self._live if ModelKey(k[0], k[1]) not in models]:
            del self._live[key]
        for hkey in [k for k in self._history if ModelKey(k[0], k[1]) not in models]:
            del self._history[hkey]


def _queue_demand(
    signals: ModelSignals | None, shape: tuple[float, float, float], roles: set[str]
) -> tuple[float, dict[str, float]]:
    if signals is None or (signals.queue_size <= 0 and signals.queue_bytes <= 0):
        return 0.0, {}
    avg_in, avg_out, hit = shape
    prompt = max(signals.queue_bytes / BYTES_PER_TOKEN, signals.queue_size * avg_in) * (1 - hit)
    output = signals.queue_size * avg_out
    shares = {ROLE_PREFILL: prompt, ROLE_DECODE: prompt + output}
    return prompt + output, {role: shares.get(role, prompt + output) for role in roles}
