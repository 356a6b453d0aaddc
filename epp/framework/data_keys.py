"""The data keys plugins exchange under upstream's names, and the values behind them.

- :data:`TOKENIZED_PROMPT` (``TokenizedPrompt/token-producer``): the prompt's token ids, which a
  ``token-producer`` puts on ``InferenceRequest.token_ids`` (as upstream puts them on the request
  body: a field of the request, not the attribute store). With upstream's ``estimate`` backend they
  are :class:`EstimatedTokens`: the prompt's bytes packed four to a pseudo-token, which match no
  engine's KV blocks but key an approximate prefix index exactly as the bytes do.
- :data:`PREFIX_CACHE_MATCH_INFO` (``PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer``,
  renamed after the producer that makes it): :class:`PrefixCacheMatches`, how many leading prompt
  blocks each candidate holds.
- :data:`SESSION_ID` (``SessionIDDataKey/session-id-producer``): the request's session id, a string.

The model-server metrics and the in-flight counts upstream also declares as data are not here:
this picker's scraper and request pipeline keep them on every endpoint whatever the configuration
says, so a reader of them always has its producer.
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import overload

from epp.framework.data import DataKey
from epp.framework.endpoint import EndpointState
from epp.framework.producers import PrefixMatchInfo
from epp.framework.prompt import Prompt

__all__ = [
    "BYTES_PER_TOKEN",
    "PREFIX_CACHE_MATCH_INFO",
    "SESSION_ID",
    "TOKENIZED_PROMPT",
    "EstimatedTokens",
    "PrefixCacheMatches",
    "TokenizedPrompt",
    "token_bytes",
]

TOKENIZED_PROMPT = DataKey("TokenizedPrompt", "token-producer")
PREFIX_CACHE_MATCH_INFO = DataKey("PrefixCacheMatchInfoDataKey", "approx-prefix-cache-producer")
SESSION_ID = DataKey("SessionIDDataKey", "session-id-producer")

BYTES_PER_TOKEN = 4
"""Upstream's ``estimate`` backend: one pseudo-token per four bytes of the prompt."""


class TokenizedPrompt:
    """The type of :data:`TOKENIZED_PROMPT` in declarations: token ids on ``InferenceRequest.token_ids``."""


class EstimatedTokens(Sequence[int]):
    """A prompt's bytes as little-endian 4-byte pseudo-tokens (the last zero-padded), read lazily.

    Nothing is packed until asked: :meth:`packed` reads only the first ``limit`` bytes, and the
    length reads the whole prompt once.
    """

    __slots__ = ("_prompt", "_whole")

    def __init__(self, prompt: Prompt) -> None:
        self._prompt = prompt
        self._whole: bytes | None = None

    def packed(self, limit: int) -> bytes:
        """The first ``limit`` bytes of the pseudo-tokens (zero-padded to a whole token)."""
        raw = self._whole[:limit] if self._whole is not None else self._prompt.prefix(limit)
        pad = -len(raw) % BYTES_PER_TOKEN
        return raw + b"\0" * pad if pad else raw

    def _bytes(self) -> bytes:
        if self._whole is None:
            self._whole = self._prompt.prefix(sys.maxsize)
        return self._whole

    def __len__(self) -> int:
        return -(-len(self._bytes()) // BYTES_PER_TOKEN)

    @overload
    def __getitem__(self, index: int) -> int: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[int]: ...
    def __getitem__(self, index: int | slice) -> int | Sequence[int]:
        ids = _unpack(self.packed(len(self._bytes())))
        return ids[index]


def _unpack(raw: bytes) -> array[int]:
    ids = array("I")
    ids.frombytes(raw)
    if sys.byteorder == "big":
        ids.byteswap()
    return ids


def token_bytes(ids: Sequence[int], max_tokens: int) -> bytes:
    """The first ``max_tokens`` ids as little-endian uint32 bytes (what upstream hashes); estimated
    tokens are their prompt bytes as they are."""
    if isinstance(ids, EstimatedTokens):
        return ids.packed(max_tokens * BYTES_PER_TOKEN)
    head = ids[:max_tokens] if len(ids) > max_tokens else ids
    try:
        packed = array("I", head)
    except (OverflowError, TypeError):  # a client's ids outside uint32 (upstream refuses them at parsing)
        packed = array("I", (int(t) & 0xFFFFFFFF for t in head if isinstance(t, int)))
    if sys.byteorder == "big":
        packed.byteswap()
    return packed.tobytes()


@dataclass(frozen=True, slots=True)
class PrefixCacheMatches:
    """Per candidate (by endpoint key): leading prompt blocks it holds; the prompt's blocks and their size."""

    matches: Mapping[str, int]
    total_blocks: int
    block_size_tokens: int

    def blocks(self, state: EndpointState) -> int:
        return self.matches.get(state.endpoint.key, 0)

    def aligned(self, candidates: Sequence[EndpointState]) -> PrefixMatchInfo:
        """The same, as one count per candidate in order (what prefix-match readers take)."""
        get = self.matches.get
        return PrefixMatchInfo([get(c.endpoint.key, 0) for c in candidates], self.total_blocks, self.block_size_tokens)
