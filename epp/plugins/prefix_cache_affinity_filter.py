"""prefix-cache-affinity-filter: narrow the candidates to those that already hold most of the prompt.

The llm-d router's ``scheduling/filter/prefixcacheaffinity``. A candidate is sticky when its
prefix-cache score (matched / total prompt blocks; prefix-match info from
``epp/plugins/_prefix_match.py``) is at least ``affinityThreshold`` (0.80); the filter keeps the
sticky candidates, or all of them when none is sticky, when there is at most one candidate, when
``affinityThreshold`` ≤ 0, or with probability ``explorationProbability`` (0: never; it seeds other
pods' caches). The TTFT load gate breaks stickiness (keeps all) when the best sticky candidate's
estimated TTFT exceeds the best other's by more than ``maxTTFTPenaltyMs`` (18000; 0 = always
stick); with ``ttftSource: prefillThroughput`` (the default) a candidate's TTFT is its in-flight
tokens (the picker's own count) / ``peakPrefillThroughput`` (15928 tokens/s) × 1000 ms.
With ``ttftSource: latencyPredictor`` a candidate's TTFT is its predicted TTFT
(``predicted-latency-producer``, named by ``latencyPredictionInfoProducerName``; one without a
prediction counts as infinite, so with no predictions at all the gate never opens, as upstream's).
``inFlightLoadProducerName`` is accepted as upstream's; this picker keeps one in-flight count per endpoint.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from epp.framework.data import DataScope, Dependencies
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._latency_source import LatencySource
from epp.plugins._prefix_match import PrefixMatchReader

__all__ = ["TYPE", "PrefixCacheAffinityFilter", "create"]

TYPE = "prefix-cache-affinity-filter"
_SOURCES = ("prefillThroughput", "latencyPredictor")


class PrefixCacheAffinityFilter(NamedPlugin):
    __slots__ = ("_rng", "exploration", "latency", "max_penalty_ms", "peak_throughput", "reader", "threshold")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})

    def __init__(
        self,
        name: str,
        reader: PrefixMatchReader,
        *,
        threshold: float = 0.8,
        exploration: float = 0.0,
        max_penalty_ms: float = 18000.0,
        peak_throughput: float = 15928.0,
        latency: LatencySource | None = None,
        rng: random.Random,
    ) -> None:
        super().__init__(name)
        self.reader = reader
        self.threshold = threshold
        self.exploration = exploration
        self.max_penalty_ms = max_penalty_ms
        self.peak_throughput = peak_throughput
        self.latency = latency
        """Set when ``ttftSource`` is ``latencyPredictor``."""
        self._rng = rng

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        everyone = list(candidates)
        if len(candidates) <= 1 or self.threshold <= 0:
            return everyone
        if self._rng.random() < self.exploration:
            return everyone
        info = self.reader.match(request, candidates)
        if info is None or info.total_blocks <= 0:
            return everyone
        total = info.total_blocks
        sticky = [c for c, m in zip(candidates, info.match_blocks, strict=True) if m / total >= self.threshold]
        if not sticky:
            return everyone
        if self.max_penalty_ms > 0 and len(sticky) < len(candidates):
            others = [c for c in candidates if all(c is not s for s in sticky)]
            if self._best_ttft_ms(request, sticky) - self._best_ttft_ms(request, others) > self.max_penalty_ms:
                return everyone
        return sticky

    def _best_ttft_ms(self, request: InferenceRequest, states: Sequence[EndpointState]) -> float:
        latency = self.latency
        if latency is None:
            return min(s.in_flight_tokens for s in states) / self.peak_throughput * 1000.0
        predictions = latency.read(request)
        if predictions is None:
            return math.inf
        return min((info.ttft_ms if (info := predictions.of(s)) is not None else math.inf) for s in states)

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        if self.latency is not None:
            self.latency.resolve(lookup)

    def consumes(self) -> Dependencies:
        return self.reader.dependencies()

    def bind_data_scope(self, scope: DataScope) -> None:
        self.reader.scope = scope


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> PrefixCacheAffinityFilter:
    where = f"{TYPE}.parameters"
    p = Params(TYPE, params)
    threshold = p.number("affinityThreshold", 0.8, maximum=1.0)
    exploration = p.number("explorationProbability", 0.0, minimum=0.0, maximum=1.0)
    penalty = p.number("maxTTFTPenaltyMs", 18000.0, minimum=0.0)
    source = p.choice("ttftSource", "prefillThroughput", _SOURCES)
    peak = p.number("peakPrefillThroughput", 15928.0, minimum=0.0)
    p.text("inFlightLoadProducerName")
    latency = LatencySource(TYPE, p) if source == "latencyPredictor" and penalty > 0 else None
    p.text("latencyPredictionInfoProducerName")
    reader = PrefixMatchReader(p)
    p.done()
    if penalty > 0 and peak == 0 and latency is None:
        raise PluginConfigError(f"{where}.peakPrefillThroughput: must be > 0 when ttftSource is prefillThroughput")
    return PrefixCacheAffinityFilter(
        name,
        reader,
        threshold=threshold,
        exploration=exploration,
        max_penalty_ms=penalty,
        peak_throughput=peak,
        latency=latency,
        rng=random.Random(context.seed),
    )
