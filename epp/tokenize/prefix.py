"""The prefix token cache: a prompt that repeats an earlier one's beginning encodes only what is new.

Long agentic prompts are conversations: each request repeats the previous one's text and adds a
little at its end. The text is cut into chunks (``epp.tokenize.chunks``, about ``chunk_chars``
characters each, at cuts where this tokenizer starts a new token whatever follows); each chunk's
ids are kept under its chained key. A request takes the ids of its longest cached run of chunks,
encodes the rest once (from the last cached cut, with offsets), splits those ids at the later cuts
and keeps them, and keeps the ids after the last cut too, so a prompt seen whole before is not
encoded at all. Special tokens from the post-processor (BOS...) are added around the result, never
stored in a chunk. llm-d's prefix store (removed from llm-d-kv-cache in February 2026) cut fixed 256-byte
blocks anywhere and returned only the prefix's tokens, approximately; here the result is always the
whole text's ids, token for token:

- the tokenizer must pass ``epp.tokenize.stability``'s proof when it loads, or the cache keeps
  whole texts only (as ``TokenCache`` did before) and says why, once;
- every join of cached ids and fresh ones is checked: a short window around the seam is encoded
  on its own and must give the same ids, and the fresh encoding must start a token at every cut
  it is split at. A failure disables prefix reuse for good (whole texts from then on), logs the
  reason once, counts it, and the request gets the whole text encoded.

Memory is bounded in tokens (``max_tokens``, the plugin's ``cacheMaxTokens``): each chunk and each
whole-text tail counts its ids (4 bytes each), least recently used first out. A chunk is shared by
every prompt that starts with it, so a conversation of N turns holds its text's ids about once
instead of N times. Everything here runs on the tokenizer's worker threads; the store is guarded
by a lock held only for lookups and insertions.
"""

from __future__ import annotations

import logging
import threading
from array import array
from dataclasses import dataclass
from typing import Any

from epp.tokenize.cache import TokenCache
from epp.tokenize.chunks import chunk_keys, cuts, last_cut, next_cut, tail_key
from epp.tokenize.spans import ByteSpans, OffsetSpans, Spans, byte_lengths

__all__ = ["DEFAULT_CHUNK_CHARS", "Chunk", "PrefixTokenCache", "SeamError"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK_CHARS = 4096
"""Measured (``epp_sim.bench.tokenize_cost --prefix``, docs/benchmarks.md): 4 and 8 Ki cost the same, 16 Ki
more (what follows the last cached cut, half a chunk on average, is encoded again on each turn)."""
_SEAM_AHEAD = 64
"""The seam window runs at least this far past the join (to the next cut)."""
_SEAM_BACK = (32, 512)
"""... and starts at a chunk's last cut this many characters before its end (or the chunk's start)."""


class SeamError(Exception):
    """The tokenizer does not start a token at a cut, or a seam's ids differ from the text's own."""


@dataclass(frozen=True, slots=True)
class Chunk:
    """One chunk's ids, and where its seam window starts: ``seam_chars`` before its end, ``seam_tokens`` ids back."""

    ids: array[int]
    seam_chars: int
    seam_tokens: int

    def __len__(self) -> int:
        return len(self.ids)


class PrefixTokenCache:
    """Ids of texts from ``tokenizer`` (a ``tokenizers.Tokenizer``), reusing cached chunks of shared prefixes.

    ``specials`` is ``(lead, trail)``: the ids the post-processor puts around a text when special
    tokens are asked for. ``unstable`` is why prefix reuse is off from the start (``None``: on);
    ``announce=False`` keeps a seam failure out of the log (the load-time proof reports its own).
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        max_tokens: int,
        specials: tuple[array[int], array[int]] = (array("I"), array("I")),
        chunk_chars: int = DEFAULT_CHUNK_CHARS,
        unstable: str | None = None,
        announce: bool = True,
    ) -> None:
        if chunk_chars < 1:
            raise ValueError(f"chunk_chars must be >= 1, got {chunk_chars}")
        self._tokenizer = tokenizer
        self._store: TokenCache[Chunk] = TokenCache(max_tokens)
        self._lock = threading.Lock()
        self._lead, self._trail = specials
        self._lengths = byte_lengths(tokenizer)
        self.chunk_chars = 0 if unstable else chunk_chars
        self.unstable = unstable
        self.hits = 0
        """Texts served wholly from the cache (no encoding)."""
        self.misses = 0
        """Texts that needed an encode (of all of them, or of what followed a cached prefix)."""
        self.prefix_tokens = 0
        """Ids served from cached chunks to texts that were then encoded past them."""
        self.seam_failures = 0
        self._announce = announce

    @property
    def evictions(self) -> int:
        return self._store.evictions

    @property
    def tokens(self) -> int:
        """Ids held, in chunks and tails."""
        return self._store.tokens

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        """Drop every entry (the counts stay)."""
        with self._lock:
            self._store.clear()

    def encode(self, text: str, *, add_special: bool) -> array[int]:
        """The ids of ``text``, exactly as the tokenizer gives them for the whole text."""
        if not self.chunk_chars:
            return self._whole(text, add_special)
        try:
            ids = self._by_chunks(text)
        except SeamError as e:
            self._disable(str(e))
            return self._whole(text, add_special)
        if not add_special or not (self._lead or self._trail):
            return ids
        return self._lead + ids + self._trail

    def _whole(self, text: str, add_special: bool) -> array[int]:
        key = tail_key(text, 0, b"", seed=2 + add_special)
        with self._lock:
            held = self._store.get(key)
            if held is not None:
                self.hits += 1
                return held.ids
            self.misses += 1
        (encoding,) = self._tokenizer.encode_batch_fast([text], add_special_tokens=add_special)
        ids = array("I", encoding.ids)
        with self._lock:
            self._store.put(key, Chunk(ids, 0, 0))
        return ids

    def _by_chunks(self, text: str) -> array[int]:
        edges = [0, *cuts(text, self.chunk_chars)]
        keys = chunk_keys(text, edges)
        tail = tail_key(text, edges[-1], keys[-1] if keys else b"")
        cached: list[Chunk] = []
        with self._lock:
            for key in keys:
                chunk = self._store.get(key)
                if chunk is None:
                    break
                cached.append(chunk)
            whole_tail = self._store.get(tail) if len(cached) == len(keys) else None
            if whole_tail is not None:
                self.hits += 1
        ids = array("I")
        for chunk in cached:
            ids += chunk.ids
        if whole_tail is not None:
            return ids + whole_tail.ids
        start = edges[len(cached)]
        fresh, spans = self._encode(text[start:])
        if cached:
            self._check_seam(text, start, cached[-1], spans, fresh)
        new = self._split(text, edges[len(cached) :], spans, fresh)
        with self._lock:
            for key, chunk in zip(keys[len(cached) :], new, strict=False):
                self._store.put(key, chunk)
            self._store.put(tail, new[-1])
            self.misses += 1
            self.prefix_tokens += len(ids)
        return ids + fresh

    def _encode(self, text: str) -> tuple[array[int], Spans]:
        """``text``'s ids (no special tokens) and where they fall: by byte lengths if they add up, else offsets."""
        lengths = self._lengths
        if lengths is not None:
            (encoding,) = self._tokenizer.encode_batch_fast([text], add_special_tokens=False)
            ids = encoding.ids
            spans = ByteSpans.of(text, ids, lengths)
            if spans is not None:
                return array("I", ids), spans
            self._lengths = None
            if self._announce:
                log.warning(
                    "token byte lengths do not add up to the text: the prefix cache asks for offsets from now on"
                )
        (encoding,) = self._tokenizer.encode_batch([text], add_special_tokens=False)
        return array("I", encoding.ids), OffsetSpans(encoding)

    def _split(self, text: str, edges: list[int], spans: Spans, fresh: array[int]) -> list[Chunk]:
        """``fresh`` (the ids of ``text[edges[0]:]``) cut at ``edges[1:]``; the last entry is the tail."""
        start = edges[0]
        seams = [
            last_cut(text, max(a + 1, b - _SEAM_BACK[1]), b - _SEAM_BACK[0])
            for a, b in zip(edges, edges[1:], strict=False)
        ]
        positions = [q - start for seam, b in zip(seams, edges[1:], strict=True) for q in (seam, b) if q is not None]
        marks = iter(_starts(spans, positions))
        chunks: list[Chunk] = []
        first = 0
        for a, b, seam in zip(edges, edges[1:], seams, strict=False):
            inner = first if seam is None else next(marks)
            last = next(marks)
            chunks.append(Chunk(fresh[first:last], b - (a if seam is None else seam), last - inner))
            first = last
        chunks.append(Chunk(fresh[first:], 0, 0))
        return chunks

    def _check_seam(self, text: str, start: int, last: Chunk, spans: Spans, fresh: array[int]) -> None:
        """The window from ``last``'s seam cut to a cut past ``start`` must encode to the ids the join gives."""
        end = next_cut(text, start + _SEAM_AHEAD)
        if end is None:
            end, upto = len(text), len(fresh)
        else:
            (upto,) = _starts(spans, [end - start])
        (window,) = self._tokenizer.encode_batch_fast([text[start - last.seam_chars : end]], add_special_tokens=False)
        joined = last.ids[len(last.ids) - last.seam_tokens :] + fresh[:upto]
        if window.ids != joined.tolist():
            raise SeamError(f"the ids across a cut at character {start} differ from the text's own")

    def _disable(self, reason: str) -> None:
        with self._lock:
            self.seam_failures += 1
            if not self.chunk_chars:
                return
            self.chunk_chars = 0
            self.unstable = reason
            self._store.clear()
        if self._announce:
            log.warning("token prefix cache off: whole prompts only from now on", extra={"reason": reason})


def _starts(spans: Spans, positions: list[int]) -> list[int]:
    """The tokens starting at ``positions`` (ascending) of an encoded text; a cut inside a token is a seam failure."""
    found = spans.starting_at(positions)
    for position, index in zip(positions, found, strict=True):
        if index is None:
            raise SeamError(f"no token starts at the cut at character {position} of the encoded text")
    return found  # type: ignore[return-value]  # no None left
