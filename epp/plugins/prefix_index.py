"""Approximate prefix-cache index: chained block hashes and a bounded LRU per endpoint.

The picker cannot see a model server's KV cache, so it remembers which prompt blocks it sent
where (upstream's "approximate prefix cache"). A prompt is cut into fixed-size byte blocks; each
block's hash is seeded with the previous one (and the first with the target model and
``cache_salt``), so a hash identifies the whole prefix up to that block and equal hashes mean
equal prefixes. Each endpoint keeps an LRU of the hashes it is believed to hold, capped at its
KV-cache block count (or a default); memory is therefore bounded by endpoints × capacity, and
forgetting an endpoint frees its whole LRU at once.
"""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Collection, Sequence

import xxhash

from epp.framework.data_keys import BYTES_PER_TOKEN, token_bytes
from epp.framework.request import InferenceRequest

__all__ = ["PrefixIndex", "chain_hashes", "request_block_hashes"]

_MIN_BLOCK_BYTES = 8  # a smaller block would only multiply hashing work for no extra precision


def chain_hashes(
    text: bytes, *, seed_parts: Sequence[str], block_bytes: int, max_blocks: int, short: bool = False
) -> list[int]:
    """Hashes of the blocks of ``text`` (at most ``max_blocks``; a trailing partial block counts).

    Only the first ``block_bytes * max_blocks`` bytes are read, through a memoryview, so a
    200 KB prompt costs the same as a 16 KB one and is never copied whole. A text shorter than
    one block has no hashes, unless ``short`` (upstream's approximate producer: one partial block).
    """
    block = max(block_bytes, _MIN_BLOCK_BYTES)
    if len(text) < block and not (short and text):
        return []
    limit = min(len(text), block * max_blocks)
    view = memoryview(text)
    prev = xxhash.xxh64_intdigest("\x00".join(seed_parts).encode())
    hashes: list[int] = []
    append = hashes.append
    digest = xxhash.xxh64_intdigest
    for start in range(0, limit, block):
        prev = digest(view[start : start + block], seed=prev)
        append(prev)
    return hashes


def request_block_hashes(request: InferenceRequest, block_size_tokens: int, max_blocks: int) -> list[int]:
    """The chained hashes of the request's token blocks (upstream's ``prefixhash.GetBlockHashes``).

    The tokens are ``request.token_ids`` (a ``token-producer``'s, the estimate backend's
    pseudo-tokens included), at most ``max_blocks`` blocks of ``block_size_tokens``, a trailing
    partial block counting; the first block is seeded with the target model and ``cache_salt``.
    No tokens, no hashes.
    """
    ids = request.token_ids
    if ids is None:
        return []
    limit = max_blocks * block_size_tokens if max_blocks < sys.maxsize else len(ids)
    return chain_hashes(
        token_bytes(ids, limit),
        seed_parts=(request.target_model or request.model, request.cache_salt),
        block_bytes=block_size_tokens * BYTES_PER_TOKEN,
        max_blocks=max_blocks,
        short=True,
    )


class PrefixIndex:
    """Per-endpoint LRU sets of block hashes; lookups count the leading blocks an endpoint holds."""

    def __init__(self, default_capacity: int = 31_250) -> None:
        if default_capacity <= 0:
            raise ValueError(f"lruCapacityPerServer must be > 0, got {default_capacity}")
        self.default_capacity = default_capacity
        self._lru: dict[str, OrderedDict[int, None]] = {}
        self._capacity: dict[str, int] = {}

    def __len__(self) -> int:
        """Total entries over all endpoints (the ``prefix_indexer_size`` gauge)."""
        return sum(len(lru) for lru in self._lru.values())

    @property
    def endpoints(self) -> Collection[str]:
        return self._lru.keys()

    def match(self, key: str, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` the endpoint ``key`` is believed to hold."""
        lru = self._lru.get(key)
        if not lru:
            return 0
        n = 0
        for h in hashes:
            if h not in lru:
                break
            n += 1
        return n

    def add(self, key: str, hashes: Sequence[int], capacity: int = 0) -> None:
        """Record that ``key`` now holds these blocks (most recent last); evict beyond capacity."""
        if not hashes:
            return
        cap = capacity if capacity > 0 else self.default_capacity
        self._capacity[key] = cap
        lru = self._lru.get(key)
        if lru is None:
            lru = self._lru[key] = OrderedDict()
        move = lru.move_to_end
        for h in hashes:
            if h in lru:
                move(h)
            else:
                lru[h] = None
        while len(lru) > cap:
            lru.popitem(last=False)

    def forget(self, keys: Collection[str]) -> None:
        """Drop everything known about endpoints that left the pool."""
        for key in keys:
            self._lru.pop(key, None)
            self._capacity.pop(key, None)
