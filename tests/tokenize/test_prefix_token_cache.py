"""The prefix token cache gives the whole text's ids token for token, encodes only what is new, and knows when not to.

Exactness is checked against the tokenizer's own whole-text encode on SmolLM2's real
``tokenizer.json`` (when the real-engine tier has provisioned it here) and on the tiny trained
one, over text with other scripts, emoji, runs of spaces and newlines, digits and code, cut at
random points and grown as a conversation grows.
"""

from __future__ import annotations

import asyncio
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors

from epp.tokenize.chunks import cuts
from epp.tokenize.local import LocalTokenizer
from epp.tokenize.prefix import PrefixTokenCache
from epp.tokenize.stability import prove_prefix_stable, sample_texts
from epp_sim.realengine.provision import cache_root, install_key

_SMOLLM2 = cache_root() / install_key() / "model" / "tokenizer.json"
_ENDINGS = ("", " x", "  \n", "🙂", "1234", " Word", "é", "\n\n\t", " 中文", "<|im_end|>")


def _smollm2() -> Tokenizer:
    if not _SMOLLM2.exists():
        pytest.skip(f"SmolLM2's tokenizer.json is not provisioned at {_SMOLLM2} (the real-engine tier makes it)")
    return Tokenizer.from_file(str(_SMOLLM2))


@pytest.fixture(params=["smollm2", "tiny"])
def tokenizer(request: pytest.FixtureRequest, tokenizer_dir: Path) -> Tokenizer:
    if request.param == "smollm2":
        return _smollm2()
    return Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))


def _variant(tokenizer: Tokenizer, **changes: Any) -> Tokenizer:
    changed = Tokenizer.from_str(tokenizer.to_str())
    for name, value in changes.items():
        setattr(changed, name, value)
    return changed


def _cache(tokenizer: Tokenizer, *, chunk_chars: int = 256, max_tokens: int = 10**7) -> PrefixTokenCache:
    proof = prove_prefix_stable(tokenizer)
    assert not isinstance(proof, str), proof
    return PrefixTokenCache(tokenizer, max_tokens=max_tokens, specials=proof, chunk_chars=chunk_chars)


def _text(seed: int) -> str:
    return "".join(sample_texts(["<|im_start|>", "<|im_end|>"], seed=seed, count=8, pieces=300))


def test_random_cuts_give_the_whole_texts_ids(tokenizer: Tokenizer) -> None:
    cache = _cache(tokenizer)
    base, rng = _text(1), random.Random(7)
    for _ in range(40):
        text = base[: rng.randrange(len(base))] + rng.choice(_ENDINGS)
        special = rng.random() < 0.5
        assert (
            cache.encode(text, add_special=special).tolist() == tokenizer.encode(text, add_special_tokens=special).ids
        )
    assert cache.unstable is None and cache.seam_failures == 0
    assert cache.prefix_tokens > 0  # later texts reused earlier ones' chunks


def test_a_growing_conversation_encodes_only_its_new_end(tokenizer: Tokenizer) -> None:
    cache = _cache(tokenizer, chunk_chars=1024)
    turns, rng = [_text(2)[:20_000]], random.Random(3)
    for i in range(6):
        turns.append(turns[-1] + f" turn {i} " + _text(10 + i)[: rng.randrange(200, 1500)])
    for n, text in enumerate(turns):
        before = cache.prefix_tokens
        assert cache.encode(text, add_special=True).tolist() == tokenizer.encode(text).ids
        if n:  # all but the last chunk or two of the previous turn came from the cache
            assert cache.prefix_tokens - before >= len(tokenizer.encode(turns[n - 1][:-2048]).ids)
    assert (cache.hits, cache.misses) == (0, len(turns))
    assert cache.encode(turns[-1], add_special=True).tolist() == tokenizer.encode(turns[-1]).ids
    assert cache.hits == 1  # a text seen whole before is not encoded again


def test_cut_everywhere_with_special_tokens_only_at_the_ends(tokenizer_dir: Path) -> None:
    """A post-processor that adds BOS and EOS: they are put around the text, never inside it from a chunk."""
    tiny = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    bos_eos = _variant(
        tiny,
        post_processor=processors.TemplateProcessing(single="<s> $A </s>", special_tokens=[("<s>", 0), ("</s>", 1)]),
    )
    cache = _cache(bos_eos, chunk_chars=1)  # a cut at every candidate
    text = _text(4)[:6000]
    for end in range(len(text) // 2, len(text), 97):
        for special in (True, False):
            assert (
                cache.encode(text[:end], add_special=special).tolist()
                == bos_eos.encode(text[:end], add_special_tokens=special).ids
            )
    assert cache.seam_failures == 0 and cache.prefix_tokens > 0


def test_cuts_depend_only_on_the_text_before_them() -> None:
    text = _text(5)
    every = cuts(text, 512)
    assert every and all(b - a >= 512 for a, b in zip([0, *every], every, strict=False))
    assert all(text[c - 1] != " " and text[c] == " " and text[c + 1].isascii() and text[c + 1].isalpha() for c in every)
    shared = every[len(every) // 2]
    assert cuts(text[: shared + 2] + "\n totally different", 512)[: len(every) // 2 + 1] == every[: len(every) // 2 + 1]
    assert cuts(text, 0) == []


def test_memory_stays_within_its_bound_in_tokens(tokenizer_dir: Path) -> None:
    tiny = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    cache = _cache(tiny, chunk_chars=512, max_tokens=3000)
    for seed in range(12):
        text = _text(seed)[:8000]
        assert cache.encode(text, add_special=True).tolist() == tiny.encode(text).ids
        assert cache.tokens <= 3000
    assert cache.evictions > 0 and len(cache) > 0
    off = _cache(tiny, max_tokens=0)
    assert off.encode("nothing kept", add_special=True).tolist() == tiny.encode("nothing kept").ids
    assert off.tokens == 0 and len(off) == 0


@pytest.mark.parametrize(
    "changes",
    [
        {"normalizer": normalizers.Strip()},  # strips each side of a cut
        {"pre_tokenizer": pre_tokenizers.WhitespaceSplit()},  # drops the space a cut starts with
    ],
    ids=["strip", "whitespace-split"],
)
def test_a_tokenizer_that_is_not_prefix_stable_caches_whole_prompts_and_says_why(
    tokenizer_dir: Path, tmp_path: Path, changes: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    unstable = _variant(Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")), **changes)
    assert isinstance(prove_prefix_stable(unstable), str)
    unstable.save(str(tmp_path / "tokenizer.json"))
    with caplog.at_level(logging.WARNING, logger="epp.tokenize"):
        local = LocalTokenizer(str(tmp_path), cache_max_tokens=10**6)
    refusals = [r for r in caplog.records if "not prefix-stable" in r.getMessage()]
    assert len(refusals) == 1 and refusals[0].reason  # type: ignore[attr-defined]
    assert local.cache.chunk_chars == 0 and local.cache.unstable
    text = _text(6)[:5000]
    for probe in (text, text + " more", text):
        assert local.encode_prompt(probe).tolist() == unstable.encode(probe).ids
    assert (local.cache.hits, local.cache.misses, local.cache.prefix_tokens) == (1, 2, 0)
    local.close()


def test_a_seam_that_fails_at_run_time_turns_prefix_reuse_off_and_the_answer_stays_exact(
    tokenizer_dir: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A tokenizer the load-time proof would refuse, forced on: the first join's seam check catches it."""
    stripping = _variant(Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")), normalizer=normalizers.Strip())
    cache = PrefixTokenCache(stripping, max_tokens=10**6, chunk_chars=256)
    text = _text(8)[:5000]
    with caplog.at_level(logging.WARNING, logger="epp.tokenize"):
        for probe in (text, text + " more", text + " more again", text + " more again"):
            assert cache.encode(probe, add_special=True).tolist() == stripping.encode(probe).ids
    assert cache.seam_failures == 1 and cache.chunk_chars == 0 and cache.unstable
    assert len([r for r in caplog.records if "prefix cache off" in r.getMessage()]) == 1
    assert cache.hits == 1  # whole texts are still cached


def test_offsets_serve_when_byte_lengths_do_not_add_up(tokenizer_dir: Path) -> None:
    """A byte-level pre-tokenizer that adds a space: the lengths miss the text by one byte, so offsets split it."""
    spaced = _variant(
        Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json")),
        pre_tokenizer=pre_tokenizers.ByteLevel(add_prefix_space=True),
    )
    cache = _cache(spaced, chunk_chars=300)
    base, rng = _text(9), random.Random(11)
    for _ in range(10):
        text = base[: rng.randrange(len(base))] + rng.choice(_ENDINGS)
        assert cache.encode(text, add_special=True).tolist() == spaced.encode(text).ids
    assert cache.prefix_tokens > 0 and cache.seam_failures == 0


async def test_concurrent_requests_on_the_worker_threads_stay_exact(tokenizer_dir: Path) -> None:
    reference = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    local = LocalTokenizer(str(tokenizer_dir), workers=2, cache_max_tokens=10**6)
    local.cache.chunk_chars = 512
    base = _text(12)
    texts = [base[: 4000 + 1500 * i] + f" request {i}" for i in range(12)]
    try:
        results = await asyncio.gather(*(local.prompt_ids(t) for t in texts + texts[::-1]))
    finally:
        local.close()
    assert [r.tolist() for r in results] == [reference.encode(t).ids for t in texts + texts[::-1]]
    assert local.cache.seam_failures == 0
