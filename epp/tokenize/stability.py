"""Whether a tokenizer may reuse cached prefixes: a proof on sample text, run once when it loads.

Prefix reuse (``epp.tokenize.prefix``) is exact only if the tokenizer starts a new token at every
cut ``epp.tokenize.chunks`` makes, whatever text follows, and encodes each side alone to the same
ids as the whole. Byte-level BPE with a GPT-2 or Llama-3 style split pattern should (SmolLM2's is
tested); a normalizer that strips or rewrites across positions, a pre-tokenizer that drops the
spaces, an added token that swallows the spaces beside it, or BPE dropout would not. Rather than
trusting a list of component names, this encodes seeded sample text (ASCII and other scripts,
emoji, runs of spaces and newlines, digits, code, the tokenizer's own added tokens) whole, cut at
every candidate, and through the prefix cache itself, and requires the same ids each time. It
also finds the ids the post-processor adds around a text (BOS...).
"""

from __future__ import annotations

import random
from array import array
from typing import Any

from epp.tokenize.chunks import CANDIDATE
from epp.tokenize.prefix import PrefixTokenCache

__all__ = ["prove_prefix_stable", "sample_texts"]

_FRAGMENTS = (
    "the cache",
    "route",
    "Request",
    "prefix",
    "it's",
    "they'll",
    "don't",
    "3.14159",
    "12345678",
    "2026-12-06",
    "x=1",
    "naïve café",
    "Ünïcödé",
    "日本語のテキスト",
    "中文文本",
    "Ελληνικά",
    "emoji 🙂👍🏽",
    "👩‍👩‍👧",
    "(parenthesis)",
    "[brackets]",
    '"quoted"',
    "...",
    "--",
    "def f(x):\n    return x + 1\n",
    "\tTabbed",
    "tail   ",
    "a\u0301b",
)
_SEPARATORS = (" ", " ", " ", "  ", "   ", "\n", "\n\n", "\r\n", " \n ", "\t", "", ". ", ", ", "  \n")


def sample_texts(added: list[str], *, seed: int = 0, count: int = 6, pieces: int = 160) -> list[str]:
    """Seeded texts mixing every kind of fragment, ``added`` tokens among them."""
    rng = random.Random(seed)
    fragments = list(_FRAGMENTS) + added
    return ["".join(rng.choice(fragments) + rng.choice(_SEPARATORS) for _ in range(pieces)) for _ in range(count)]


def _specials(tokenizer: Any) -> tuple[array[int], array[int]] | str:
    text = "special tokens around a text"
    with_them = tokenizer.encode_batch_fast([text], add_special_tokens=True)[0].ids
    plain = tokenizer.encode_batch_fast([text], add_special_tokens=False)[0].ids
    for lead in range(len(with_them) - len(plain) + 1):
        if with_them[lead : lead + len(plain)] == plain:
            return array("I", with_them[:lead]), array("I", with_them[lead + len(plain) :])
    return "its post-processor changes a text's own ids, not only the ends"


def prove_prefix_stable(tokenizer: Any) -> tuple[array[int], array[int]] | str:
    """``(lead, trail)`` special ids if ``tokenizer`` (a ``tokenizers.Tokenizer``) passes, else why it does not.

    The prefix cache itself is run on the samples with a cut at every candidate, so its seam
    checks and its splitting by offsets are proven with the rest.
    """
    specials = _specials(tokenizer)
    if isinstance(specials, str):
        return specials
    lead, trail = specials
    added = [token.content for token in tokenizer.get_added_tokens_decoder().values()][:64]
    for text in sample_texts(added):
        whole = tokenizer.encode_batch_fast([text], add_special_tokens=True)[0].ids
        edges = [0, *(m.start() + 1 for m in CANDIDATE.finditer(text)), len(text)]
        pieces = tokenizer.encode_batch_fast(
            [text[a:b] for a, b in zip(edges, edges[1:], strict=False)], add_special_tokens=False
        )
        joined = list(lead) + [i for piece in pieces for i in piece.ids] + list(trail)
        if joined != whole:
            return "encoding the text cut between a word and ' word' gives other ids than encoding it whole"
        cache = PrefixTokenCache(tokenizer, max_tokens=len(whole) * 4, specials=specials, chunk_chars=1, announce=False)
        for probe in (text[: len(text) // 2], text, text + " and more", text):
            ids = cache.encode(probe, add_special=True).tolist()
            if cache.unstable is not None:
                return cache.unstable
            if ids != tokenizer.encode_batch_fast([probe])[0].ids:
                return "a cached prefix joined to a fresh encoding gave other ids than the whole text's"
    return lead, trail
