"""Where a prompt is cut into cacheable chunks, and the chained keys of those chunks.

A cut must fall where the tokenizer starts a new token whatever text follows, or the ids of the
text before it would depend on the text after it. The rule here is a position ``b`` with a
non-space before it, a space at it and an ASCII letter after it (``"word| next"``): for byte-level
BPE tokenizers with a GPT-2 or Llama-3 style split pattern the piece before ``b`` ends there (a run
of letters, digits or punctuation ends at a space) and the piece after it is the space and its
word. Whether a given tokenizer honours the rule is not assumed: ``epp.tokenize.stability`` checks it
on sample text when the tokenizer loads, and the prefix cache checks every seam it joins.

Cuts are a function of the text alone (the first candidate at least ``chunk_chars`` past the
previous cut), so two prompts that share a prefix share its cuts. Each chunk's key hashes its text
and the two characters after its cut (the rule looks at them) chained to the previous chunk's key,
as llm-d's prefix store chains its blocks (XXH3-128 here, as the whole-prompt cache).
"""

from __future__ import annotations

import re

import xxhash

__all__ = ["CANDIDATE", "LOOKAHEAD", "chunk_keys", "cuts", "last_cut", "next_cut", "tail_key"]

CANDIDATE = re.compile(r"\S [A-Za-z]")
"""A cut is one past the start of a match: between the non-space and the space."""
LOOKAHEAD = 2
"""Characters after a cut that the rule reads, so they are part of the chunk's key."""


def next_cut(text: str, at_least: int) -> int | None:
    """The first cut at or after ``at_least`` (and past position 0), or ``None``."""
    match = CANDIDATE.search(text, max(at_least, 1) - 1)
    return None if match is None else match.start() + 1


def cuts(text: str, chunk_chars: int) -> list[int]:
    """Every cut of ``text``, each the first candidate at least ``chunk_chars`` past the one before (0: none)."""
    if chunk_chars <= 0:
        return []
    found: list[int] = []
    at = chunk_chars
    while (cut := next_cut(text, at)) is not None:
        found.append(cut)
        at = cut + chunk_chars
    return found


def last_cut(text: str, low: int, high: int) -> int | None:
    """The last candidate cut ``c`` with ``low <= c <= high``, or ``None``."""
    last = None
    for match in CANDIDATE.finditer(text, max(low, 1) - 1, high + LOOKAHEAD):
        last = match.start() + 1
    return last


def chunk_keys(text: str, edges: list[int]) -> list[bytes]:
    """The chained key of each chunk ``text[edges[i]:edges[i + 1]]`` (with its lookahead)."""
    keys: list[bytes] = []
    previous = b""
    for start, end in zip(edges, edges[1:], strict=False):
        piece = text[start : end + LOOKAHEAD].encode("utf-8", "surrogatepass")
        previous = xxhash.xxh3_128_digest(previous + piece)
        keys.append(previous)
    return keys


def tail_key(text: str, start: int, previous: bytes, *, seed: int = 1) -> bytes:
    """The key of ``text[start:]`` after the chunk keyed ``previous``: a text seen whole before needs no encoding.

    ``seed`` keeps kinds of entries apart (a tail after chunks, or a whole text with or without
    special tokens).
    """
    piece = text[start:].encode("utf-8", "surrogatepass")
    return xxhash.xxh3_128_digest(previous + piece, seed=seed)
