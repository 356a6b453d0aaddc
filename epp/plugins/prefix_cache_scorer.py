"""prefix-cache-scorer: prefer endpoints that already hold the request's prompt prefix.

llm-d's formula: ``score = w·min(1, match·blockSize/matchLengthScaleTokens)² + (1−w)·match/total``
with ``matchLengthWeight`` w (default 0, i.e. matched / total leading blocks) and
``matchLengthScaleTokens`` 8192; 0 for an endpoint without match info.

As in the llm-d router the scorer keeps no index: it reads ``PrefixCacheMatchInfoDataKey/<producer>``,
produced before scheduling by the plugin ``prefixMatchInfoProducerName`` names, else by
``approx-prefix-cache-producer`` (which the loader adds, with its defaults, to a configuration that
declares none: ``config.data_graph``). The producer may be ``approx-prefix-cache-producer``
(the approximate index), ``precise-prefix-cache-producer`` (the pods' KV events) or
``burst-prefix-cache-producer``. It publishes each candidate's match in the cycle
(:func:`~epp.framework.disaggregation.publish_match`): what ``prefix-based-pd-decider`` reads of
the decode pod's cache. The approximate index's own settings (``blockSizeTokens``,
``lruCapacityPerServer``, ...) belong to ``approx-prefix-cache-producer``: given here they are refused
by name, as upstream's strict decoder refuses them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.data import NO_DATA, DataScope, Dependencies
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, PrefixCacheMatches
from epp.framework.disaggregation import publish_match
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "PrefixCacheScorer", "create"]

TYPE = "prefix-cache-scorer"
_INDEX_SETTINGS = (
    "autoTune",
    "blockSize",
    "blockSizeTokens",
    "lruCapacityPerServer",
    "maxPrefixBlocksToMatch",
    "maxPrefixTokensToMatch",
)


class PrefixCacheScorer(NamedPlugin):
    """Scorer over the prefix-match info one producer published for the request."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(
        self,
        name: str = TYPE,
        *,
        match_info_producer: str = "",
        match_length_weight: float = 0.0,
        match_length_scale_tokens: int = 8192,
    ) -> None:
        super().__init__(name)
        self.match_info_producer_name = match_info_producer
        self.match_length_weight = match_length_weight
        self.match_length_scale_tokens = match_length_scale_tokens
        self.key = PREFIX_CACHE_MATCH_INFO.named(match_info_producer)
        self._data: DataScope = NO_DATA

    def consumes(self) -> Dependencies:
        return Dependencies(required={self.key: PrefixCacheMatches})

    def bind_data_scope(self, scope: DataScope) -> None:
        self._data = scope

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        info = self._data.get(request, self.key)
        if not isinstance(info, PrefixCacheMatches) or info.total_blocks <= 0:
            return [0.0] * len(candidates)
        total, get = info.total_blocks, info.matches.get
        # What prefix-based-pd-decider reads of the decode pick's cache.
        publish_match(cycle, candidates, info.matches, total, info.block_size_tokens)
        w = self.match_length_weight
        if not w:
            return [get(c.endpoint.key, 0) / total for c in candidates]
        scale, block = self.match_length_scale_tokens, info.block_size_tokens
        return [
            w * min(1.0, m * block / scale) ** 2 + (1 - w) * m / total
            for m in (get(c.endpoint.key, 0) for c in candidates)
        ]


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> PrefixCacheScorer:
    """Factory; upstream's three parameters."""
    for setting in _INDEX_SETTINGS:
        if setting in params:
            raise PluginConfigError(
                f"{TYPE}.parameters.{setting}: the approximate index's settings belong to approx-prefix-cache-producer "
                "(the llm-d router moved them there): declare one with this parameter"
            )
    p = Params(TYPE, params)
    producer = p.text("prefixMatchInfoProducerName") or ""
    weight = p.number("matchLengthWeight", 0.0, minimum=0.0, maximum=1.0)
    scale = p.integer("matchLengthScaleTokens", 8192)
    p.done()
    if weight > 0 and scale <= 0:
        raise PluginConfigError(
            f"{TYPE}.parameters.matchLengthScaleTokens: must be > 0 when matchLengthWeight > 0, got {scale}"
        )
    return PrefixCacheScorer(
        name, match_info_producer=producer, match_length_weight=weight, match_length_scale_tokens=scale
    )
