"""prefix-cache-scorer: prefer endpoints that already hold the request's prompt prefix.

llm-d's formula: ``score = w·min(1, match·blockSize/matchLengthScaleTokens)² + (1−w)·match/total``
with ``matchLengthWeight`` w (default 0, i.e. matched / total leading blocks) and
``matchLengthScaleTokens`` 8192; 0 when the prompt is shorter than one block.

Where ``match`` comes from:

- approximate (default): after each routing decision the chosen endpoint is recorded as holding
  every block of the prompt (``pre_request``), which is what makes requests sharing a system
  prompt or a chat history stick to one pod until its load outweighs the affinity;
- precise: ``prefixMatchInfoProducerName`` names a producer (``precise-prefix-cache-producer``)
  whose match info comes from the pods' KV events. A request the producer has no info for (its
  tokenization failed, or it carries a ``cache_salt``) is scored from the approximate index,
  which keeps learning from every decision for exactly that fallback.

The scorer is itself a prefix-match info producer (``prefix_match``): upstream's scorer reads the
info of ``approx-prefix-cache-producer``, which other plugins read too; here that index lives in
the scorer, so they read it from the scorer. Whichever source it scored from, it publishes each
candidate's match in the cycle (:func:`~epp.framework.disaggregation.publish_match`): what
``prefix-based-pd-decider`` reads of the decode pod's cache.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any

from epp.framework.disaggregation import PrefixMatch, publish_match
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.producers import PrefixMatchInfo, PrefixMatchInfoProducer
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.plugins.prefix_index import PrefixIndex, block_tokens, prompt_hashes

__all__ = ["PrefixCacheScorer"]

TYPE = "prefix-cache-scorer"


class PrefixCacheScorer(NamedPlugin):
    """Scorer + PreRequest + endpoint-removal observer around one :class:`PrefixIndex`."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER, PluginKind.PRE_REQUEST})

    def __init__(
        self,
        name: str,
        *,
        block_size_tokens: int = 16,
        max_prefix_blocks: int = 256,
        lru_capacity_per_server: int = 31_250,
        auto_tune: bool = True,
        match_info_producer: str = "",
        match_length_weight: float = 0.0,
        match_length_scale_tokens: int = 8192,
    ) -> None:
        super().__init__(name)
        self.match_info_producer_name = match_info_producer
        self.producer: PrefixMatchInfoProducer | None = None
        self.match_length_weight = match_length_weight
        self.match_length_scale_tokens = match_length_scale_tokens
        self.block_size_tokens = block_size_tokens
        self.max_prefix_blocks = max_prefix_blocks
        self.auto_tune = auto_tune
        self.index = PrefixIndex(lru_capacity_per_server)
        self._cycle_key = f"{TYPE}/{name}/hashes"

    def _block_tokens(self, candidates: Sequence[EndpointState]) -> int:
        return block_tokens(candidates, self.block_size_tokens, self.auto_tune)

    def hashes(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[int]:
        """The prompt's block hashes, computed once per cycle and shared with ``pre_request``."""
        cached: list[int] | None = cycle.get(self._cycle_key)
        if cached is None:
            tokens = self._block_tokens(candidates)
            cached = prompt_hashes(request, block_tokens=tokens, max_blocks=self.max_prefix_blocks)
            cycle[self._cycle_key] = cached
        return cached

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        name = self.match_info_producer_name
        if not name:
            return
        plugin = lookup(f"{TYPE}.parameters.prefixMatchInfoProducerName", name)
        if isinstance(plugin, PrefixCacheScorer):  # it reads the producer it names: a chain of scorers would loop
            raise PluginConfigError(
                f"prefixMatchInfoProducerName: plugin {name!r} is a {TYPE}, not a producer of prefix-match info"
            )
        if not isinstance(plugin, PrefixMatchInfoProducer):
            raise PluginConfigError(
                f"prefixMatchInfoProducerName: plugin {name!r} (type {plugin.typed_name.type!r}) "
                "produces no prefix-match info"
            )
        self.producer = plugin

    def prefix_match(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> PrefixMatchInfo:
        """Leading prompt blocks each candidate holds: the named producer's, else the approximate index's.

        This is what the scorer scores, and what plugins reading prefix-match info from this scorer
        (``no-hit-lru-scorer``, ``prefix-cache-affinity-filter``) see.
        """
        producer = self.producer
        if producer is not None:
            info = producer.prefix_match(cycle, request, candidates)
            if info is not None:
                return info
        hashes = self.hashes(cycle, request, candidates)
        match = self.index.match
        matches = [match(c.endpoint.key, hashes) for c in candidates] if hashes else [0] * len(candidates)
        return PrefixMatchInfo(matches, len(hashes), self._block_tokens(candidates))

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        info = self.prefix_match(cycle, request, candidates)
        if info.total_blocks > 0:
            _publish(cycle, candidates, info)
        return self._scores(info.match_blocks, info.total_blocks, info.block_size_tokens)

    def _scores(self, matches: Sequence[int], total: int, block_size: int) -> list[float]:
        if total <= 0:
            return [0.0] * len(matches)
        w = self.match_length_weight
        if not w:
            return [m / total for m in matches]
        scale = self.match_length_scale_tokens
        return [w * min(1.0, m * block_size / scale) ** 2 + (1 - w) * m / total for m in matches]

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        hashes = cycle.get(self._cycle_key)
        if not hashes:
            return
        for profile_result in result.profile_results.values():
            if profile_result is None or not profile_result.targets:
                continue
            target = profile_result.targets[0]
            capacity = target.metrics.cache_num_blocks if self.auto_tune else 0
            self.index.add(target.endpoint.key, hashes, capacity)

    def endpoints_removed(self, keys: Collection[str]) -> None:
        self.index.forget(keys)

    @property
    def index_size(self) -> int:
        return len(self.index)


def _publish(cycle: CycleState, candidates: Sequence[EndpointState], info: PrefixMatchInfo) -> None:
    """Tell the cycle what each candidate holds (the P/D decider reads the decode pick's)."""
    for state, blocks in zip(candidates, info.match_blocks, strict=True):
        publish_match(cycle, state, PrefixMatch(blocks, info.total_blocks, info.block_size_tokens))


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> PrefixCacheScorer:
    """Factory; upstream's parameter names (``blockSize`` in characters is deprecated and refused)."""
    if "blockSize" in params:
        raise PluginConfigError(f"{TYPE}.parameters.blockSize: deprecated (characters); use blockSizeTokens")
    p = Params(TYPE, params)
    block_tokens = p.integer("blockSizeTokens", 16, minimum=1)
    max_blocks = p.integer("maxPrefixBlocksToMatch", 256, minimum=1)
    max_tokens = p.integer("maxPrefixTokensToMatch", 0, minimum=0)
    if max_tokens:
        max_blocks = max(1, max_tokens // block_tokens)
    capacity = p.integer("lruCapacityPerServer", 31_250, minimum=1)
    auto_tune = p.boolean("autoTune", True)
    producer = p.text("prefixMatchInfoProducerName") or ""
    weight = p.number("matchLengthWeight", 0.0, minimum=0.0, maximum=1.0)
    scale = p.integer("matchLengthScaleTokens", 8192, minimum=1)
    p.done()
    return PrefixCacheScorer(
        name,
        block_size_tokens=block_tokens,
        max_prefix_blocks=max_blocks,
        lru_capacity_per_server=capacity,
        auto_tune=auto_tune,
        match_info_producer=producer,
        match_length_weight=weight,
        match_length_scale_tokens=scale,
    )
