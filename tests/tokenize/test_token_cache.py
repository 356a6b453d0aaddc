"""The token cache holds at most its bound in ids, least recently used out first, whatever the prompts' sizes."""

from __future__ import annotations

from array import array

import pytest

from epp.tokenize.cache import TokenCache, cache_key


def _ids(n: int) -> array[int]:
    return array("I", range(n))


def test_bound_is_on_tokens_not_entries() -> None:
    cache = TokenCache(max_tokens=1000)
    for i in range(10):
        cache.put(cache_key(b"p", str(i).encode()), _ids(300))
    assert cache.tokens == 900 and len(cache) == 3  # the seven oldest went
    assert cache.evictions == 7
    assert cache.get(cache_key(b"p", b"0")) is None
    assert cache.get(cache_key(b"p", b"9")) == _ids(300)


def test_a_read_keeps_an_entry_and_a_too_long_prompt_is_not_kept() -> None:
    cache = TokenCache(max_tokens=600)
    a, b, c = (cache_key(b"p", k) for k in (b"a", b"b", b"c"))
    cache.put(a, _ids(300))
    cache.put(b, _ids(300))
    assert cache.get(a) is not None  # a is now the most recent
    cache.put(c, _ids(300))
    assert cache.get(b) is None and cache.get(a) is not None
    cache.put(cache_key(b"p", b"huge"), _ids(601))
    assert cache.tokens == 600 and cache.get(cache_key(b"p", b"huge")) is None
    cache.put(a, _ids(100))  # replacing an entry frees what it held
    assert cache.tokens == 400
    assert (cache.hits, cache.misses) == (2, 2)


def test_kinds_and_prompts_are_separate_keys_and_zero_turns_it_off() -> None:
    assert cache_key(b"p", b'"x"') != cache_key(b"c", b'"x"')
    assert len(cache_key(b"p", b"x" * 400_000)) == 16
    off = TokenCache(0)
    off.put(cache_key(b"p", b"x"), _ids(1))
    assert len(off) == 0
    with pytest.raises(ValueError, match="max_tokens"):
        TokenCache(-1)
