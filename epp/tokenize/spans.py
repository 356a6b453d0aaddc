"""Where an encoding's tokens fall in its text: the token that starts at a given character, or none.

The prefix cache splits one encoding's ids at its cuts, so it must know which token starts at each
cut (and that none straddles it). ``Encoding`` offsets say so for any tokenizer, but asking
``encode_batch`` for them costs ~1.65x the CPU of ``encode_batch_fast`` (SmolLM2, 400 KiB: ~295
against ~180 ms). A byte-level BPE without a normalizer needs no offsets: each token stands for
a fixed number of the text's UTF-8 bytes (one per character of its byte-level vocabulary string,
the UTF-8 length of an added token's content), so running sums of those lengths are the tokens'
byte ends. Whether the lengths hold is checked on every text: they must sum to the text's own
UTF-8 length, else the caller encodes again with offsets.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Protocol

__all__ = ["ByteSpans", "OffsetSpans", "Spans", "byte_lengths"]


class Spans(Protocol):
    def starting_at(self, positions: Sequence[int]) -> list[int | None]:
        """For each character position (ascending), the index of the token starting there, or ``None``."""
        ...


class OffsetSpans:
    """Spans from an ``Encoding``'s character offsets (any tokenizer; the encode must keep offsets)."""

    __slots__ = ("_encoding",)

    def __init__(self, encoding: Any) -> None:
        self._encoding = encoding

    def starting_at(self, positions: Sequence[int]) -> list[int | None]:
        return [self._one(p) for p in positions]

    def _one(self, position: int) -> int | None:
        encoding = self._encoding
        low, high = 0, len(encoding)
        while low < high:  # the first token ending past the position (char_to_token scans them all)
            middle = (low + high) // 2
            if encoding.token_to_chars(middle)[1] <= position:
                low = middle + 1
            else:
                high = middle
        if low == len(encoding) or encoding.token_to_chars(low)[0] != position:
            return None
        return low


class ByteSpans:
    """Spans from per-id UTF-8 byte lengths; ``None`` from :meth:`of` when they do not add up to the text."""

    __slots__ = ("_ends", "_text")

    def __init__(self, text: str, ends: list[int]) -> None:
        self._text = text
        self._ends = ends

    @classmethod
    def of(cls, text: str, ids: Sequence[int], lengths: Sequence[int]) -> ByteSpans | None:
        try:
            ends = list(accumulate(map(lengths.__getitem__, ids)))
        except IndexError:  # an id past the table
            return None
        if (ends[-1] if ends else 0) != len(text.encode("utf-8", "surrogatepass")):
            return None
        return cls(text, ends)

    def starting_at(self, positions: Sequence[int]) -> list[int | None]:
        found: list[int | None] = []
        text, ends = self._text, self._ends
        at_char = at_byte = 0
        for position in positions:
            at_byte += len(text[at_char:position].encode("utf-8", "surrogatepass"))
            at_char = position
            index = bisect_right(ends, at_byte)
            ok = index < len(ends) and (at_byte == 0 if index == 0 else ends[index - 1] == at_byte)
            found.append(index if ok else None)
        return found


def byte_lengths(tokenizer: Any) -> list[int] | None:
    """Each id's UTF-8 byte length, for a byte-level BPE without a normalizer; else ``None``."""
    if tokenizer.normalizer is not None or type(tokenizer.decoder).__name__ != "ByteLevel":
        return None
    if type(tokenizer.model).__name__ != "BPE":
        return None
    vocab: dict[str, int] = tokenizer.get_vocab(with_added_tokens=False)
    added: dict[int, Any] = tokenizer.get_added_tokens_decoder()
    lengths = [0] * (max([*vocab.values(), *added, -1]) + 1)
    for token, index in vocab.items():
        lengths[index] = len(token)
    for index, token in added.items():
        lengths[index] = len(token.content.encode("utf-8"))
    return lengths
