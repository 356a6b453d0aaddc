"""The simulated KV cache: a pool of fixed-size token blocks with vLLM-style automatic prefix caching.

Tokens are approximated as 4 characters of prompt text (or one entry of a token-id prompt), so
a block is ``block_size × 4`` characters. That is also the simulator's default tokenization
(:func:`char_token_ids`, one id per 4 characters): what its KV events carry for a text prompt and
what its render and tokenize endpoints return, so a picker that tokenizes through them (llm-d's
precise sample) gets exactly the ids the events announce. Each full prompt block gets a chained hash (xxh64 of the
previous block's hash and the block's content, salted with the model or adapter name, as vLLM
salts with the LoRA id), so two prompts share cached blocks exactly as long as they share a
block-aligned prefix.

Accounting follows vLLM's ``BlockPool``: a block is *in use* while a running sequence holds it;
when the last holder finishes, a hashed block stays in the cache but joins the free queue
(evictable, least recently used first), and is evicted only when a new allocation needs room.
KV usage is therefore ``in-use blocks / total`` and drops to 0 when the server is idle, while
the cached prefixes survive until pressure evicts them.

With ``record_events`` the pool also notes what vLLM announces as KV events (``BlockStored``
with each newly cached block's token ids, ``BlockRemoved`` on eviction, ``AllBlocksCleared`` on
a reset), as vLLM 0.32 encodes them (maps with every field it sends: ``medium``, ``lora_name``,
``extra_keys`` — the adapter name per block, as vLLM hashes it in — ``group_idx`` and
``kv_cache_spec_kind``), for the engine to publish once per step.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import xxhash

__all__ = ["CHARS_PER_TOKEN", "VOCAB_SIZE", "BlockPool", "KvHolding", "block_hashes", "char_token_ids", "count_tokens"]

#: the simulator's tokenizer: one token per 4 characters of text (English averages ~4)
CHARS_PER_TOKEN = 4
#: ids of the default tokenization are below this (a vocabulary the size of a real model's)
VOCAB_SIZE = 1 << 17


def char_token_ids(text: str) -> list[int]:
    """The default tokenization's ids of ``text``: one per 4 characters, a hash of those characters.

    ``len(char_token_ids(t)) == count_tokens(t)`` for any non-empty ``t``, and block ``i`` of a text
    prompt (characters ``i·b·4 ..``) is exactly ids ``i·b ..`` of it, so events and render agree.
    """
    step = CHARS_PER_TOKEN
    digest = xxhash.xxh32_intdigest
    return [digest(text[i : i + step].encode("utf-8", "surrogatepass")) % VOCAB_SIZE for i in range(0, len(text), step)]


def count_tokens(text: str) -> int:
    """Approximate token count of ``text`` (at least 1, as every prompt has a BOS token)."""
    return max(1, math.ceil(len(text) / CHARS_PER_TOKEN))


def block_hashes(prompt: str | Sequence[int], *, block_size: int, salt: str) -> list[int]:
    """Chained hashes of the prompt's *full* blocks (a partial last block is never cached)."""
    parent = xxhash.xxh64_intdigest(salt.encode())
    out: list[int] = []
    if isinstance(prompt, str):
        data = prompt.encode("utf-8", "surrogatepass")
        step = block_size * CHARS_PER_TOKEN
        # Work on characters, not bytes, so the block boundary matches count_tokens().
        if len(data) != len(prompt):
            chunks = [prompt[i : i + step].encode("utf-8", "surrogatepass") for i in range(0, len(prompt), step)]
            if len(prompt) % step:
                chunks.pop()
        else:
            chunks = [data[i : i + step] for i in range(0, len(data) - step + 1, step)]
    else:
        ids = list(prompt)
        chunks = [
            b",".join(str(t).encode() for t in ids[i : i + block_size])
            for i in range(0, len(ids) - block_size + 1, block_size)
        ]
    for chunk in chunks:
        parent = xxhash.xxh64_intdigest(parent.to_bytes(8, "little") + chunk)
        out.append(parent)
    return out


class KvHolding:
    """The blocks one sequence holds: shared cached blocks (by hash) plus private ones."""

    __slots__ = ("cached", "private")

    def __init__(self) -> None:
        self.cached: list[int] = []
        self.private = 0

    @property
    def blocks(self) -> int:
        return len(self.cached) + self.private


class BlockPool:
    """``num_blocks`` KV blocks; a hash → refcount map of cached blocks; an LRU of evictable ones."""

    def __init__(
        self, num_blocks: int, *, enable_prefix_caching: bool = True, block_size: int = 16, record_events: bool = False
    ) -> None:
        self.num_blocks = num_blocks
        self.enable_prefix_caching = enable_prefix_caching
        self.block_size = block_size
        #: KV events since the last :meth:`take_events` (None when not recording)
        self.events: list[dict[str, Any]] | None = [] if record_events else None
        self._lora_ids: dict[str, int] = {}  # vLLM's (deprecated) integer adapter id, by name
        self._free_uncached = num_blocks
        self._refs: dict[int, int] = {}  # cached block hash → holders (0 = evictable)
        self._evictable: OrderedDict[int, None] = OrderedDict()  # least recently freed first

    @property
    def used_blocks(self) -> int:
        return self.num_blocks - self._free_uncached - len(self._evictable)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by running sequences (vLLM's ``kv_cache_usage_perc``)."""
        return self.used_blocks / self.num_blocks

    @property
    def cached_blocks(self) -> int:
        """Blocks that still hold a reusable prefix (held or evictable)."""
        return len(self._refs)

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of ``hashes`` are cached."""
        if not self.enable_prefix_caching:
            return 0
        n = 0
        for h in hashes:
            if h not in self._refs:
                break
            n += 1
        return n

    def can_admit(self, hashes: Sequence[int], matched: int, blocks: int) -> bool:
        """Whether a new sequence holding ``matched`` cached blocks plus the rest of ``blocks`` fits."""
        revived = sum(1 for h in hashes[:matched] if self._refs[h] == 0)
        return blocks - matched <= self._free_uncached + len(self._evictable) - revived

    def admit(self, holding: KvHolding, hashes: Sequence[int], matched: int, blocks: int) -> bool:
        """Take the ``matched`` cached blocks and enough new ones for ``blocks``; False if it cannot fit."""
        if not self.can_admit(hashes, matched, blocks):
            return False
        for h in hashes[:matched]:
            if self._refs[h] == 0:
                del self._evictable[h]
            self._refs[h] += 1
            holding.cached.append(h)
        return self.grow(holding, blocks)

    def grow(self, holding: KvHolding, blocks: int) -> bool:
        """Make ``holding`` at least ``blocks`` long, evicting cold cached blocks; False if full."""
        need = blocks - holding.blocks
        if need <= 0:
            return True
        if need > self._free_uncached + len(self._evictable):
            return False
        take = min(need, self._free_uncached)
        self._free_uncached -= take
        evicted = []
        for _ in range(need - take):
            h, _ = self._evictable.popitem(last=False)
            del self._refs[h]
            evicted.append(h)
        if evicted and self.events is not None:
            self.events.append({"type": "BlockRemoved", "block_hashes": evicted, "medium": "GPU", "group_idx": 0})
        holding.private += need
        return True

    def commit(
        self, holding: KvHolding, hashes: Sequence[int], tokens: Sequence[int] | None = None, lora: str | None = None
    ) -> None:
        """Publish the sequence's computed full prompt blocks to the cache (after its prefill).

        ``tokens`` (the prompt's token ids) and ``lora`` (the adapter) only feed the BlockStored event."""
        if not self.enable_prefix_caching:
            return
        first = len(holding.cached)
        for h in hashes[first:]:
            if holding.private == 0 or h in self._refs:
                # Another sequence computed the same block meanwhile: ours stays private, as in vLLM.
                break
            self._refs[h] = 1
            holding.private -= 1
            holding.cached.append(h)
        last = len(holding.cached)
        if self.events is not None and last > first:
            bs = self.block_size
            token_ids = list(tokens[first * bs : last * bs]) if tokens is not None else []
            parent = hashes[first - 1] if first else None
            stored = list(hashes[first:last])
            lora_id = self._lora_ids.setdefault(lora, len(self._lora_ids) + 1) if lora is not None else None
            self.events.append(
                {
                    "type": "BlockStored",
                    "block_hashes": stored,
                    "parent_block_hash": parent,
                    "token_ids": token_ids,
                    "block_size": bs,
                    "lora_id": lora_id,
                    "medium": "GPU",
                    "lora_name": lora,
                    "extra_keys": [[lora] if lora is not None else None for _ in stored],
                    "group_idx": 0,
                    "kv_cache_spec_kind": "full_attention",
                }
            )

    def take_events(self) -> list[dict[str, Any]]:
        """The events recorded since the last call (empty when not recording)."""
        events = self.events
        if not events:
            return []
        self.events = []
        return events

    def reset(self) -> bool:
        """vLLM's ``reset_prefix_cache``: drop every cached block; False while running sequences hold some."""
        if any(self._refs.values()):
            return False
        self._free_uncached += len(self._evictable)
        self._evictable.clear()
        self._refs.clear()
        if self.events is not None:
            self.events.append({"type": "AllBlocksCleared"})
        return True

    def release(self, holding: KvHolding) -> None:
        """Drop every block ``holding`` has; cached ones become evictable, tail blocks first."""
        for h in reversed(holding.cached):
            refs = self._refs[h] - 1
            self._refs[h] = refs
            if refs == 0:
                self._evictable[h] = None
        self._free_uncached += holding.private
        holding.cached.clear()
        holding.private = 0
