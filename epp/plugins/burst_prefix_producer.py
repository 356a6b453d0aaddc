"""burst-prefix-cache-producer: send a burst of requests sharing a prompt to the same replica(s).

The llm-d router's producer (``requestcontrol/dataproducer/burstprefix``, Alpha): when many
requests sharing a prompt arrive at once (the ``n`` samples of an RL rollout step) every cache is
cold, so a prefix-cache scorer scores them all 0 and load balancing scatters them, prefilling
the prompt on every replica. Here requests arriving within ``windowDurationMs`` are collected,
assigned jointly when the window closes (``_burst_assign``), and each is published as a full
prefix match on its replica and none elsewhere (``PrefixCacheMatchInfoDataKey/<this plugin's
name>``), for a ``prefix-cache-scorer`` whose ``prefixMatchInfoProducerName`` names this plugin.
A request overlapping no other gets no affinity.

The first request of a window waits out the window on the picker's clock and then seals it for
every request of the window (even when it is itself cancelled), so the window needs no task of
its own. Every request waits up to the window. Parameters and defaults are upstream's:
``windowDurationMs`` (100, 1..10000), ``maxPerReplica`` (-1: a group goes whole to one replica),
``blockSizeTokens`` (64), ``maxPrefixTokensToMatch`` (0: 2048 blocks; else ≥ ``blockSizeTokens``),
``minColocateBlocks`` (0: only identical prompts are placed), ``maxBatchSize`` (1000, -1: no cap;
a request past it gets no affinity, with an error logged) and ``balanceBy`` (``requests`` or
``tokens``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from epp.clock import Clock
from epp.framework.data import NO_DATA, DataScope
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, PrefixCacheMatches
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.plugins._burst_assign import UNLIMITED, Entry, assign
from epp.plugins._prefix_match import PrefixMatchPublisher
from epp.plugins.prefix_index import request_block_hashes

__all__ = ["TYPE", "BatchFullError", "BurstPrefixCacheProducer", "create"]

TYPE = "burst-prefix-cache-producer"
_MAX_WINDOW_MS = 10_000
_DEFAULT_MAX_BLOCKS = 2048
BALANCE_MODES = ("requests", "tokens")


class BatchFullError(Exception):
    """The window already holds ``maxBatchSize`` requests (this one goes on without an affinity)."""


class _Window:
    __slots__ = ("entries", "sealed")

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.sealed = asyncio.Event()


class BurstPrefixCacheProducer(PrefixMatchPublisher, NamedPlugin):
    """DataProducer: co-locates the requests of a window that share a prompt prefix."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_PRODUCER})

    def __init__(
        self,
        name: str = TYPE,
        *,
        clock: Clock,
        window: float = 0.1,
        max_per_replica: int = UNLIMITED,
        block_size_tokens: int = 64,
        max_blocks: int = _DEFAULT_MAX_BLOCKS,
        min_colocate_blocks: int = 0,
        max_batch_size: int = 1000,
        by_tokens: bool = False,
    ) -> None:
        super().__init__(name)
        self.clock = clock
        self.window = window
        self.max_per_replica = max_per_replica
        self.block_size_tokens = block_size_tokens
        self.max_blocks = max_blocks
        self.min_colocate_blocks = min_colocate_blocks
        self.max_batch_size = max_batch_size
        self.by_tokens = by_tokens
        self.key = PREFIX_CACHE_MATCH_INFO.named(name)
        self._open: _Window | None = None
        self._data: DataScope = NO_DATA

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        entry = Entry(request_block_hashes(request, self.block_size_tokens, self.max_blocks), candidates)
        window = self._open
        if window is None:
            window = self._open = _Window()
            window.entries.append(entry)
            try:
                await self.clock.sleep(self.window)
            finally:  # a cancelled first request still closes the window for the others
                self._seal(window)
        else:
            if self.max_batch_size != UNLIMITED and len(window.entries) >= self.max_batch_size:
                raise BatchFullError(f"{TYPE} {self.typed_name.name!r}: maxBatchSize {self.max_batch_size} reached")
            window.entries.append(entry)
            await window.sealed.wait()
        total = len(entry.hashes)
        target = entry.assigned
        matches = {target.endpoint.key: total} if target is not None and target in candidates else {}
        self._data.put(request, self.key, PrefixCacheMatches(matches, total, self.block_size_tokens))

    def _seal(self, window: _Window) -> None:
        if self._open is window:
            self._open = None
        assign(
            window.entries,
            max_per_replica=self.max_per_replica,
            min_colocate=self.min_colocate_blocks,
            by_tokens=self.by_tokens,
        )
        window.sealed.set()


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> BurstPrefixCacheProducer:
    """Factory; upstream's parameters, ranges and defaults."""
    p = Params(TYPE, params)
    window_ms = p.integer("windowDurationMs", 100)
    per_replica = p.integer("maxPerReplica", UNLIMITED)
    block = p.integer("blockSizeTokens", 64)
    max_tokens = p.integer("maxPrefixTokensToMatch", 0)
    min_colocate = p.integer("minColocateBlocks", 0)
    batch = p.integer("maxBatchSize", 1000)
    balance = p.string("balanceBy", "") or "requests"
    p.done()
    where = f"{TYPE}.parameters"
    checks = (
        ("windowDurationMs", window_ms, 0 < window_ms <= _MAX_WINDOW_MS, f"must be in 1..{_MAX_WINDOW_MS}"),
        ("maxPerReplica", per_replica, per_replica == UNLIMITED or per_replica >= 1, "must be -1 or >= 1"),
        ("blockSizeTokens", block, block > 0, "must be > 0"),
        ("maxPrefixTokensToMatch", max_tokens, max_tokens == 0 or max_tokens >= block, "must be 0 or >= blockSize"),
        ("minColocateBlocks", min_colocate, min_colocate >= 0, "must be >= 0"),
        ("maxBatchSize", batch, batch == UNLIMITED or batch >= 1, "must be -1 or >= 1"),
        ("balanceBy", balance, balance in BALANCE_MODES, f"must be one of {', '.join(BALANCE_MODES)}"),
    )
    for field_name, value, ok, what in checks:
        if not ok:
            raise PluginConfigError(f"{where}.{field_name}: {what}, got {value!r}")
    return BurstPrefixCacheProducer(
        name,
        clock=context.clock,
        window=window_ms / 1000,
        max_per_replica=per_replica,
        block_size_tokens=block,
        max_blocks=max_tokens // block if max_tokens else _DEFAULT_MAX_BLOCKS,
        min_colocate_blocks=min_colocate,
        max_batch_size=batch,
        by_tokens=balance == "tokens",
    )
