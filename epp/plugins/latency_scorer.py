"""latency-scorer: score candidates by predicted headroom to the request's SLOs, or by load when nothing is predicted.

The llm-d router's ``scheduling/scorer/latency``, step for step:

1. **No prediction** for any candidate (no model yet, the predictor failed): the composite fallback,
   ``round(100 × (wkv·(1 − KV) + wq·(maxQ − q)/maxQ + wp·prefix)) / 100`` with the weights
   normalised by their sum (KV alone when it is ≤ 0; the queue term is 1 when every queue is empty).
2. Candidates with a prediction and a negative headroom are **negative**, the rest (those without a
   prediction too) **positive**: if any is positive, only the positive ones are scored, with the
   configured ``headroomSelectionStrategy`` (``least``: closest to the SLO, packing work so other
   endpoints keep their headroom; ``most``: the most headroom); negatives get 0.
3. All negative: the **idle** ones (nothing in flight from this picker) alone, if any; else the first
   non-empty bucket of TPOT-only, TTFT-only, both negative; always with ``least`` (the smallest deficit).

A bucket is scored by min–max normalising |headroom| per dimension (a dimension whose spread is
≤ 1e-9 is 0.5, and its weight moves to the other), blending with ``ttftWeight`` / ``tpotWeight``
(normalised; (1, 0) when both are 0) into c, and ``(int((1 − c)·100) + 1) / 100`` (``least``) or
``(int(c·100) + 1) / 100`` (``most``): 0.01 to 1.01, where upstream's profile clamps 1.01 to 1;
here the scorer caps it at 1 itself (the same order; a score over 1 would count as a contract breach).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from epp.framework.data import DataScope, Dependencies
from epp.framework.endpoint import EndpointState
from epp.framework.latency import LatencyPrediction
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._latency_source import LatencySource
from epp.plugins._prefix_match import PrefixMatchReader

__all__ = ["TYPE", "LatencyScorer", "create"]

TYPE = "latency-scorer"
LEAST, MOST = "least", "most"
_EPS = 1e-9

Scored = tuple[int, LatencyPrediction]
"""A candidate's index and its prediction."""


class LatencyScorer(NamedPlugin):
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(
        self,
        name: str,
        source: LatencySource,
        *,
        ttft_weight: float = 0.8,
        tpot_weight: float = 0.2,
        strategy: str = LEAST,
        composite: tuple[float, float, float] = (1.0, 1.0, 1.0),
        prefix: PrefixMatchReader | None = None,
    ) -> None:
        super().__init__(name)
        self.source = source
        total = ttft_weight + tpot_weight
        self.weights = (ttft_weight / total, tpot_weight / total) if total > 0 else (1.0, 0.0)
        self.strategy = strategy
        kv, queue, prefix_weight = composite
        total = kv + queue + prefix_weight
        self.composite = (kv / total, queue / total, prefix_weight / total) if total > 0 else (1.0, 0.0, 0.0)
        self._prefix = prefix

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        self.source.resolve(lookup)

    def consumes(self) -> Dependencies:
        # Optional: with no prefix-match producer in the configuration the fallback's prefix term is 0.
        return self._prefix.dependencies(optional=True) if self._prefix is not None else Dependencies()

    def bind_data_scope(self, scope: DataScope) -> None:
        if self._prefix is not None:
            self._prefix.scope = scope

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        predictions = self.source.read(request)
        infos = [predictions.of(c) if predictions is not None else None for c in candidates]
        if all(info is None for info in infos):
            return self._composite(cycle, request, candidates)
        scores = [0.0] * len(candidates)
        positive: list[Scored] = []
        negative: list[Scored] = []
        for i, info in enumerate(infos):
            if info is not None and (info.ttft_headroom < 0 or info.tpot_headroom < 0):
                negative.append((i, info))
            elif info is not None:
                positive.append((i, info))
            else:
                positive.append((i, _NO_PREDICTION))
        if positive:
            self._bucket(positive, scores, self.strategy)
            return scores
        idle = [s for s in negative if s[1].dispatched == 0]
        if idle:
            self._bucket(idle, scores, LEAST)
            return scores
        tpot_only = [s for s in negative if s[1].ttft_headroom >= 0]
        ttft_only = [s for s in negative if s[1].ttft_headroom < 0 <= s[1].tpot_headroom]
        both = [s for s in negative if s[1].ttft_headroom < 0 and s[1].tpot_headroom < 0]
        self._bucket(tpot_only or ttft_only or both, scores, LEAST)
        return scores

    def _bucket(self, bucket: Sequence[Scored], scores: list[float], strategy: str) -> None:
        alpha, beta = self.weights
        ttft = [abs(info.ttft_headroom) for _, info in bucket]
        tpot = [abs(info.tpot_headroom) for _, info in bucket]
        ttft_low, ttft_range = min(ttft), max(ttft) - min(ttft)
        tpot_low, tpot_range = min(tpot), max(tpot) - min(tpot)
        if ttft_range <= _EPS < tpot_range:
            alpha, beta = 0.0, 1.0
        elif tpot_range <= _EPS < ttft_range:
            alpha, beta = 1.0, 0.0
        for (i, _), a, b in zip(bucket, ttft, tpot, strict=True):
            n_ttft = (a - ttft_low) / ttft_range if ttft_range > _EPS else 0.5
            n_tpot = (b - tpot_low) / tpot_range if tpot_range > _EPS else 0.5
            combined = alpha * n_ttft + beta * n_tpot
            scores[i] = min((int((1.0 - combined if strategy == LEAST else combined) * 100) + 1) / 100, 1.0)

    def _composite(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[float]:
        kv_weight, queue_weight, prefix_weight = self.composite
        prefixes = [0.0] * len(candidates)
        if self._prefix is not None and candidates:
            info = self._prefix.match(request, candidates)
            if info is not None and info.total_blocks > 0:
                prefixes = [m / info.total_blocks for m in info.match_blocks]
        longest = max((c.metrics.waiting_queue for c in candidates), default=0)
        out = []
        for candidate, prefix in zip(candidates, prefixes, strict=True):
            queue = (longest - candidate.metrics.waiting_queue) / longest if longest > 0 else 1.0
            blend = kv_weight * (1.0 - candidate.metrics.kv_cache_usage) + queue_weight * queue + prefix_weight * prefix
            out.append(math.floor(100 * blend + 0.5) / 100)  # Go's math.Round: half away from zero
        return out


_NO_PREDICTION = LatencyPrediction(0.0, 0.0, True, True, 0.0, 0.0, 0)
"""What a candidate without a prediction counts as among the positive ones (headroom 0, as upstream's zero value)."""


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> LatencyScorer:
    p = Params(TYPE, parameters)
    ttft = p.number("ttftWeight", 0.8, minimum=0.0)
    tpot = p.number("tpotWeight", 0.2, minimum=0.0)
    strategy = p.choice("headroomSelectionStrategy", LEAST, (LEAST, MOST))
    composite = (
        p.number("compositeKVWeight", 1.0, minimum=0.0),
        p.number("compositeQueueWeight", 1.0, minimum=0.0),
        p.number("compositePrefixWeight", 1.0, minimum=0.0),
    )
    source = LatencySource(TYPE, p)
    prefix = PrefixMatchReader(p)
    p.done()
    return LatencyScorer(
        name,
        source,
        ttft_weight=ttft,
        tpot_weight=tpot,
        strategy=strategy,
        composite=composite,
        prefix=prefix,
    )
