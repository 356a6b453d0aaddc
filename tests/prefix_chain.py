"""The approximate prefix chain as the loader wires it, for tests: token-producer (estimate) →
approx-prefix-cache-producer → prefix-cache-scorer, each scoped to the request data it declares."""

from __future__ import annotations

from collections.abc import Sequence

from epp.framework.data import DataScope
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins.approx_prefix_producer import ApproxPrefixCacheProducer
from epp.plugins.prefix_cache_scorer import PrefixCacheScorer
from epp.plugins.token_estimate import EstimatingTokenProducer

__all__ = ["PrefixChain"]


class PrefixChain:
    """``await chain.route(request, candidates, pick)``: the scores, then ``pick`` recorded as chosen."""

    def __init__(self, producer: ApproxPrefixCacheProducer | None = None, scorer: PrefixCacheScorer | None = None):
        self.tokens = EstimatingTokenProducer("token-producer")
        self.producer = producer or ApproxPrefixCacheProducer()
        self.scorer = scorer or PrefixCacheScorer()
        for plugin in (self.producer, self.scorer):
            plugin.bind_data_scope(DataScope.of(plugin))

    async def route(
        self, request: InferenceRequest, cands: Sequence[EndpointState], pick: int, profile: str = "default"
    ) -> list[float]:
        await self.tokens.produce(request, cands)
        await self.producer.produce(request, cands)
        cycle = CycleState()
        scores = self.scorer.score(cycle, request, cands)
        self.producer.pre_request(cycle, request, SchedulingResult({profile: ProfileResult([cands[pick]])}, profile))
        return scores
