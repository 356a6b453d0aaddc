"""slo-headroom-tier-filter: keep the candidates predicted to meet the SLOs; explore the others 1% of the time.

The llm-d router's ``scheduling/filter/sloheadroomtier``: a candidate whose TTFT and TPOT headroom
(``predicted-latency-producer``'s) are both ≥ 0 is in the positive tier; one with a negative
headroom, or without a prediction while others have one, in the negative tier (validity flags are
not consulted, as upstream). With both tiers non-empty the negative one is kept with probability
``epsilonExploreNeg`` (0.01: overloaded endpoints get a trickle, so their predictions can recover),
else the positive one; with one tier non-empty, that tier. With at most one candidate, or no
prediction at all, every candidate is kept.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._latency_source import LatencySource

__all__ = ["TYPE", "SloHeadroomTierFilter", "create"]

TYPE = "slo-headroom-tier-filter"


class SloHeadroomTierFilter(NamedPlugin):
    __slots__ = ("_rng", "epsilon", "source")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})

    def __init__(self, name: str, source: LatencySource, *, epsilon: float = 0.01, rng: random.Random) -> None:
        super().__init__(name)
        self.source = source
        self.epsilon = epsilon
        self._rng = rng

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        self.source.resolve(lookup)

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        predictions = self.source.read(request) if len(candidates) > 1 else None
        if predictions is None:
            return list(candidates)
        positive: list[EndpointState] = []
        negative: list[EndpointState] = []
        unknown: list[EndpointState] = []
        for candidate in candidates:
            info = predictions.of(candidate)
            if info is None:
                unknown.append(candidate)
            elif info.ttft_headroom >= 0 and info.tpot_headroom >= 0:
                positive.append(candidate)
            else:
                negative.append(candidate)
        if not positive and not negative:
            return list(candidates)
        negative += unknown
        if positive and negative:
            return negative if self._rng.random() < self.epsilon else positive
        return positive or negative


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> SloHeadroomTierFilter:
    p = Params(TYPE, parameters)
    epsilon = p.number("epsilonExploreNeg", 0.01, minimum=0.0, maximum=1.0)
    source = LatencySource(TYPE, p)
    p.done()
    return SloHeadroomTierFilter(name, source, epsilon=epsilon, rng=random.Random(context.seed))
