"""The token-id cache: a prompt tokenized once serves every later request with the same prompt, in bounded memory.

Keys are a 128-bit XXH3 digest of the prompt as the request carried it (kind + JSON), not the
prompt itself: a 400 KiB prompt costs 16 bytes of key. Values are ``array('I')`` (4 bytes a token).
The bound is on tokens held, not on entries, so long prompts cannot grow the process without
limit (an entry count let a picker serving unique 100k-token prompts grow by gigabytes); the
least recently used entries go first, and a prompt longer than the whole bound is not kept.
The prefix cache (``epp.tokenize.prefix``) keeps its chunks in one of these too: any value with a
length (its token count) can be held.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sized
from typing import Generic, TypeVar

import xxhash

__all__ = ["TokenCache", "cache_key"]

V = TypeVar("V", bound=Sized)


def cache_key(kind: bytes, payload: bytes) -> bytes:
    """The key of a prompt: its kind (``p`` completion, ``c`` chat) and its serialized form, hashed."""
    return xxhash.xxh3_128_digest(payload, seed=kind[0])


class TokenCache(Generic[V]):
    """LRU of token ids (values whose ``len`` is their token count) bounded by ``max_tokens`` in total (0: no cache)."""

    __slots__ = ("_entries", "evictions", "hits", "max_tokens", "misses", "tokens")

    def __init__(self, max_tokens: int) -> None:
        if max_tokens < 0:
            raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
        self.max_tokens = max_tokens
        self._entries: OrderedDict[bytes, V] = OrderedDict()
        self.tokens = 0
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: bytes) -> V | None:
        ids = self._entries.get(key)
        if ids is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return ids

    def put(self, key: bytes, ids: V) -> None:
        """Keep ``ids`` under ``key``, evicting the least recently used beyond the bound."""
        size = len(ids)
        if size > self.max_tokens:
            return
        entries = self._entries
        old = entries.pop(key, None)
        if old is not None:
            self.tokens -= len(old)
        entries[key] = ids
        self.tokens += size
        while self.tokens > self.max_tokens:
            _, evicted = entries.popitem(last=False)
            self.tokens -= len(evicted)
            self.evictions += 1

    def clear(self) -> None:
        """Drop every entry (the counts stay)."""
        self._entries.clear()
        self.tokens = 0
