"""The precise KV-block index: which token blocks each endpoint really holds, from its own events.

Keys are our own hashes of token-id blocks (xxh64 chained over 4-byte little-endian token ids,
the chain seeded with the model name), never vLLM's: vLLM's hash depends on its hash function,
seed and block size, which the picker cannot rely on (see the spec). The engine's block hashes
serve only as opaque names: each endpoint keeps ``engine hash → our keys`` (1:many when the
engine block is a multiple of ours) so BlockRemoved and the parent of a later BlockStored can be
resolved, plus a refcount per key so a key another stored block still covers survives a removal.

Speculative entries (llm-d's ``speculativeIndexing``): the picker may record the keys of a
request it just routed as held by that endpoint until a deadline, so the next request sharing the
prefix follows it before the engine's BlockStored arrives; they expire on their own and never
count as engine blocks.

Only blocks whose key the picker can rebuild from token ids are indexed: a block vLLM hashed
with more than its tokens and adapter (``extra_keys`` naming multimodal items or a cache salt)
ends the stored run there, and groups that are not full attention (a hybrid model's sliding
window) are skipped, as llm-d skips groups that are not prefix-indexable.

Memory is bounded by ``max_entries`` engine blocks over all endpoints (beyond it, the storing
endpoint's oldest blocks are forgotten: a forgotten block only costs a miss); dropping an
endpoint frees its whole map at once.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

import xxhash

from epp.kvevents.decode import BlockHash, BlockStored

__all__ = ["KvBlockIndex", "block_keys", "chain_seed", "indexable_blocks"]

_GPU = "GPU"
_FULL_ATTENTION = "full_attention"


def _plain_blocks(event: BlockStored) -> int:
    """Leading blocks of ``event`` keyed by tokens (and the adapter) alone: vLLM hashed nothing else in."""
    extra = event.extra_keys
    if extra is None:
        return len(event.block_hashes)
    for i, keys in enumerate(extra):
        if keys and tuple(keys) != (event.lora_name,):
            return i
    return len(event.block_hashes)


def indexable_blocks(event: BlockStored, block_size: int) -> int:
    """Leading engine blocks of ``event`` an index of ``block_size``-token keys can hold; 0: skip it.

    None for a tier other than GPU, a group that is not full attention, an engine block size
    that is not a multiple of ours, or token ids that do not fill the blocks.
    """
    if (
        (event.medium is not None and event.medium != _GPU)
        or (event.kv_cache_spec_kind is not None and event.kv_cache_spec_kind != _FULL_ATTENTION)
        or event.block_size % block_size
        or len(event.token_ids) != len(event.block_hashes) * event.block_size
    ):
        return 0
    return _plain_blocks(event)


def chain_seed(model: str) -> int:
    """The parent of a chain's first block: the model (or adapter) name, hashed."""
    return xxhash.xxh64_intdigest(model.encode())


def block_keys(tokens: Sequence[int], block_size: int, parent: int, max_blocks: int | None = None) -> list[int]:
    """Chained keys of the full ``block_size``-token blocks of ``tokens`` (a partial tail is dropped)."""
    n = len(tokens) // block_size
    if max_blocks is not None:
        n = min(n, max_blocks)
    if n == 0:
        return []
    if isinstance(tokens, array) and tokens.typecode == "I":  # token-producer's ids: hashed in place
        data = memoryview(tokens)[: n * block_size].cast("B")
    else:
        data = memoryview(array("I", tokens[: n * block_size]).tobytes())
    step = block_size * 4
    digest = xxhash.xxh64_intdigest
    out: list[int] = []
    for start in range(0, n * step, step):
        parent = digest(data[start : start + step], seed=parent)
        out.append(parent)
    return out


class _Pod:
    __slots__ = ("engine", "refs", "speculative")

    def __init__(self) -> None:
        self.engine: dict[BlockHash, tuple[int, ...]] = {}  # insertion order = age
        self.refs: dict[int, int] = {}
        self.speculative: dict[int, float] = {}  # key → deadline (monotonic seconds)


class KvBlockIndex:
    """Per-endpoint block sets fed by BlockStored / BlockRemoved / AllBlocksCleared."""

    def __init__(self, block_size: int, *, max_entries: int) -> None:
        if block_size < 1 or max_entries < 1:
            raise ValueError(f"block_size and max_entries must be >= 1, got {block_size}, {max_entries}")
        self.block_size = block_size
        self.max_entries = max_entries
        self._pods: dict[str, _Pod] = {}
        self._entries = 0
        self.skipped = 0
        """Stored events not indexed (unknown parent, block size not a multiple of ours, other tier)."""

    def __len__(self) -> int:
        """Engine blocks indexed over all endpoints."""
        return self._entries

    def endpoints(self) -> list[str]:
        return list(self._pods)

    def blocks(self, pod: str) -> int:
        """Engine blocks indexed for ``pod``."""
        entry = self._pods.get(pod)
        return len(entry.engine) if entry is not None else 0

    def stored(self, pod: str, model: str, event: BlockStored) -> bool:
        """Index a BlockStored event for ``pod``; False (and counted) when it cannot be indexed."""
        bs = self.block_size
        plain = indexable_blocks(event, bs)
        if plain == 0:
            self.skipped += 1
            return False
        entry = self._pods.get(pod)
        if entry is None:
            entry = self._pods[pod] = _Pod()
        if event.parent_block_hash is None:
            parent = chain_seed(event.lora_name or model)
        else:
            parent_keys = entry.engine.get(event.parent_block_hash)
            if not parent_keys:
                self.skipped += 1
                return False
            parent = parent_keys[-1]
        keys = block_keys(event.token_ids[: plain * event.block_size], bs, parent)
        per_block = event.block_size // bs
        engine, refs = entry.engine, entry.refs
        for i, engine_hash in enumerate(event.block_hashes[:plain]):
            mine = tuple(keys[i * per_block : (i + 1) * per_block])
            old = engine.pop(engine_hash, None)
            if old is not None:
                self._unref(entry, old)
            engine[engine_hash] = mine
            self._entries += 1
            for key in mine:
                refs[key] = refs.get(key, 0) + 1
        while self._entries > self.max_entries and engine:
            self._unref(entry, engine.pop(next(iter(engine))))
        return True

    def _unref(self, entry: _Pod, keys: tuple[int, ...]) -> None:
        self._entries -= 1
        refs = entry.refs
        for key in keys:
            n = refs.get(key, 0) - 1
            if n > 0:
                refs[key] = n
            else:
                refs.pop(key, None)

    def removed(self, pod: str, hashes: Sequence[BlockHash]) -> None:
        entry = self._pods.get(pod)
        if entry is None:
            return
        for engine_hash in hashes:
            keys = entry.engine.pop(engine_hash, None)
            if keys is not None:
                self._unref(entry, keys)

    def speculate(self, pod: str, keys: Sequence[int], deadline: float, now: float) -> None:
        """Record ``keys`` as held by ``pod`` until ``deadline`` (expired ones are dropped here)."""
        entry = self._pods.get(pod)
        if entry is None:
            entry = self._pods[pod] = _Pod()
        speculative = entry.speculative
        if speculative:
            for key in [k for k, until in speculative.items() if until <= now]:
                del speculative[key]
        for key in keys:
            speculative[key] = deadline

    def clear(self, pod: str) -> None:
        """Forget what ``pod`` holds (AllBlocksCleared, a gap, a publisher restart, the endpoint left)."""
        entry = self._pods.pop(pod, None)
        if entry is not None:
            self._entries -= len(entry.engine)

    def longest_prefix(self, pod: str, keys: Sequence[int], now: float = 0.0) -> int:
        """Leading blocks of ``keys`` that ``pod`` holds (or speculatively holds past ``now``), up to its first miss."""
        entry = self._pods.get(pod)
        if entry is None:
            return 0
        refs, speculative = entry.refs, entry.speculative
        n = 0
        for key in keys:
            if key not in refs and speculative.get(key, 0.0) <= now:
                break
            n += 1
        return n
