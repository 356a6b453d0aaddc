"""approx-prefix-cache-producer: which candidates probably hold the request's prompt prefix (the approximate index).

The llm-d router's producer (``requestcontrol/dataproducer/approximateprefix``), split out of
``prefix-cache-scorer`` (which now only scores what a producer found). The picker cannot see a
model server's KV cache, so it remembers which prompt blocks it sent where:

- before scheduling (``produce``), the request's tokenized prompt (``TokenizedPrompt``: a
  ``token-producer``'s ids, or its ``estimate`` backend's pseudo-tokens, four prompt bytes each) is
  cut into blocks of ``blockSizeTokens`` tokens, each hashed with the one before it (the first
  seeded with the target model and ``cache_salt``), and each candidate gets the number of leading
  blocks it is believed to hold: ``PrefixCacheMatchInfoDataKey/<this plugin's name>``
  (:class:`~epp.framework.data_keys.PrefixCacheMatches`), for ``prefix-cache-scorer`` and the
  other readers of prefix-match info;
- after the decision (``pre_request``), the primary profile's endpoint, and the ``prefill``
  profile's when there is one, are recorded as holding every block, in a per-endpoint LRU capped
  at the endpoint's KV-cache block count (``autoTune``) or ``lruCapacityPerServer``; an endpoint
  that leaves the pool is forgotten at once.

Parameters and defaults are upstream's: ``autoTune`` (true: the block size and capacity come from
the endpoints' ``cache_config_info`` when they report it), ``blockSizeTokens`` (16, and never
below 64 at request time: upstream's floor, so a vLLM block of 16 is matched 64 tokens at a
time), ``maxPrefixTokensToMatch`` (131072; 0 falls back to ``maxPrefixBlocksToMatch``, 2048;
both 0: the whole prompt), ``lruCapacityPerServer`` (31250), and the deprecated ``blockSize``
(characters), taken as ``blockSizeTokens`` when that is left at its default. A prompt shorter
than a block is one (partial) block. A request without tokens (its tokenization failed) gets no
match info, so it is scored 0 everywhere, as upstream. Before each ``/metrics`` scrape the
producer reports its index's size (``measure``: the ``prefix_indexer_size`` gauges).

With replicas sharing state (``--state-sync-address``) the producer is
:class:`~epp.framework.replication.Replicated`: each insertion it makes is published (the endpoint,
its capacity and the block hashes, msgpack) and the peers' insertions are applied to its index as
its own, so every replica's approximate index learns every replica's decisions.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from epp.framework.data import NO_DATA, DataScope
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, PrefixCacheMatches
from epp.framework.endpoint import EndpointState
from epp.framework.measures import Measurements
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.replication import Publish
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.plugins._prefix_match import PrefixMatchPublisher
from epp.plugins.prefix_index import PrefixIndex, request_block_hashes

__all__ = ["TYPE", "ApproxPrefixCacheProducer", "create"]

TYPE = "approx-prefix-cache-producer"

MIN_BLOCK_SIZE_TOKENS = 64
"""Upstream's floor on the block size (llm-d-router#1158): one LRU entry per (endpoint, block)."""
PREFILL_PROFILE = "prefill"
"""The profile whose pick is recorded too (upstream's hard-coded P/D prefill profile name)."""
_DEFAULT_BLOCK_SIZE = 16
_UNLIMITED = sys.maxsize


@dataclass(frozen=True, slots=True)
class _Matches(PrefixCacheMatches):
    """What this producer publishes, with the block hashes ``pre_request`` records."""

    hashes: Sequence[int] = ()


class ApproxPrefixCacheProducer(PrefixMatchPublisher, NamedPlugin):
    """DataProducer + PreRequest + endpoint-removal observer around one :class:`PrefixIndex`."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_PRODUCER, PluginKind.PRE_REQUEST})

    def __init__(
        self,
        name: str = TYPE,
        *,
        block_size_tokens: int = _DEFAULT_BLOCK_SIZE,
        max_prefix_tokens: int = 131_072,
        max_prefix_blocks: int = 2048,
        lru_capacity_per_server: int = 31_250,
        auto_tune: bool = True,
    ) -> None:
        super().__init__(name)
        self.block_size_tokens = block_size_tokens
        self.max_prefix_tokens = max_prefix_tokens
        self.max_prefix_blocks = max_prefix_blocks
        self.lru_capacity_per_server = lru_capacity_per_server
        self.auto_tune = auto_tune
        self.index = PrefixIndex(lru_capacity_per_server)
        self.key = PREFIX_CACHE_MATCH_INFO.named(name)
        self._data: DataScope = NO_DATA
        self._publish: Publish | None = None

    # -- per request -------------------------------------------------------------------------------

    def block_size(self, candidates: Sequence[EndpointState]) -> int:
        """Tokens per block: the endpoints' own when auto-tuned and reported, never below the floor."""
        size = self.block_size_tokens
        if self.auto_tune and candidates and candidates[0].metrics.cache_block_size > 0:
            size = candidates[0].metrics.cache_block_size
        return max(size, MIN_BLOCK_SIZE_TOKENS)

    def max_blocks(self, block_size: int) -> int:
        if self.max_prefix_tokens > 0:
            return self.max_prefix_tokens // block_size
        return self.max_prefix_blocks or _UNLIMITED

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        if request.token_ids is None or not candidates:
            return
        block = self.block_size(candidates)
        hashes = request_block_hashes(request, block, self.max_blocks(block))
        match = self.index.match
        matches = {c.endpoint.key: match(c.endpoint.key, hashes) for c in candidates} if hashes else {}
        self._data.put(request, self.key, _Matches(matches, len(hashes), block, hashes))

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        found = self._data.get(request, self.key)
        if not isinstance(found, _Matches) or not found.hashes:
            return
        picked = [result.profile_results.get(result.primary_profile)]
        if result.primary_profile != PREFILL_PROFILE:
            picked.append(result.profile_results.get(PREFILL_PROFILE))
        for profile_result in picked:
            if profile_result is None or not profile_result.targets:
                continue
            target = profile_result.targets[0]
            reported = target.metrics.cache_num_blocks if self.auto_tune else 0
            capacity = reported or self.lru_capacity_per_server
            self.index.add(target.endpoint.key, found.hashes, capacity)
            if self._publish is not None:
                self._publish(msgpack.packb((target.endpoint.key, capacity, array("Q", found.hashes).tobytes())))

    # -- shared with the other replicas --------------------------------------------------------------

    def replicate(self, publish: Publish | None) -> None:
        """Publish each insertion from now on (None: stop); see the module docstring."""
        self._publish = publish

    def apply_replicated(self, payload: bytes) -> None:
        """A peer's insertion: ``[endpoint key, capacity, hashes as native uint64s]``; ``ValueError`` when not one.

        The hashes travel as one byte string (8 bytes a block, checked by its length rather than
        integer by integer); every replica of a pool runs on one architecture.
        """
        try:
            key, capacity, packed = msgpack.unpackb(payload)
        except (ValueError, TypeError, msgpack.UnpackException) as e:
            raise ValueError(f"{TYPE}: not a prefix insertion: {e}") from e
        if (
            not isinstance(key, str)
            or not isinstance(capacity, int)
            or capacity < 0
            or not isinstance(packed, bytes)
            or len(packed) % 8
        ):
            raise ValueError(f"{TYPE}: not a prefix insertion: {key!r:.40}, {capacity!r:.20}, {type(packed).__name__}")
        self.index.add(key, array("Q", packed).tolist(), capacity)

    def endpoints_removed(self, keys: Collection[str]) -> None:
        self.index.forget(keys)

    @property
    def index_size(self) -> int:
        return len(self.index)

    def measure(self, into: Measurements) -> None:
        into.prefix_index_size(self.typed_name, self.index_size)


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> ApproxPrefixCacheProducer:
    """Factory; upstream's parameter names and defaults."""
    p = Params(TYPE, params)
    auto_tune = p.boolean("autoTune", True)
    block = p.integer("blockSizeTokens", _DEFAULT_BLOCK_SIZE)
    legacy = p.integer("blockSize", 0)
    if legacy > 0 and block == _DEFAULT_BLOCK_SIZE:
        block = legacy  # upstream: the deprecated character block size fills a default blockSizeTokens
    max_tokens = p.integer("maxPrefixTokensToMatch", 131_072, minimum=0)
    max_blocks = p.integer("maxPrefixBlocksToMatch", 2048, minimum=0)
    capacity = p.integer("lruCapacityPerServer", 31_250, minimum=1)
    p.done()
    if not auto_tune and block <= 0:
        raise PluginConfigError(f"{TYPE}.parameters.blockSizeTokens: must be > 0 when autoTune is false, got {block}")
    return ApproxPrefixCacheProducer(
        name,
        block_size_tokens=max(block, 1),
        max_prefix_tokens=max_tokens,
        max_prefix_blocks=max_blocks,
        lru_capacity_per_server=capacity,
        auto_tune=auto_tune,
    )
