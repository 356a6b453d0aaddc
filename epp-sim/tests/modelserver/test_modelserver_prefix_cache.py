"""Block hashing and the KV block pool: prefix matches, refcounts, LRU eviction, usage."""

from __future__ import annotations

from epp_sim.modelserver.prefix_cache import BlockPool, KvHolding, block_hashes, count_tokens

BS = 16
BLOCK_CHARS = BS * 4


def test_count_tokens_is_four_chars_each_and_at_least_one() -> None:
    assert count_tokens("") == 1
    assert count_tokens("abcd") == 1
    assert count_tokens("abcde") == 2
    assert count_tokens("x" * 400) == 100


def test_hashes_cover_full_blocks_and_chain_on_the_prefix() -> None:
    a = block_hashes("a" * (3 * BLOCK_CHARS + 10), block_size=BS, salt="m")
    b = block_hashes("a" * (2 * BLOCK_CHARS) + "b" * BLOCK_CHARS, block_size=BS, salt="m")
    assert len(a) == 3  # the partial fourth block is not cached
    assert a[:2] == b[:2] and a[2] != b[2]
    assert block_hashes("short", block_size=BS, salt="m") == []


def test_hashes_depend_on_salt_so_adapters_do_not_share_kv() -> None:
    text = "p" * (2 * BLOCK_CHARS)
    assert block_hashes(text, block_size=BS, salt="base") != block_hashes(text, block_size=BS, salt="lora-a")


def test_hashes_of_token_ids_and_non_ascii_text() -> None:
    ids = list(range(40))
    assert len(block_hashes(ids, block_size=BS, salt="m")) == 2
    assert block_hashes(ids, block_size=BS, salt="m")[0] == block_hashes(ids[:16], block_size=BS, salt="m")[0]
    # Non-ASCII text splits on characters (as count_tokens counts them), not bytes.
    text = "é" * (2 * BLOCK_CHARS + 3)
    assert len(block_hashes(text, block_size=BS, salt="m")) == 2


def test_admit_reuses_cached_blocks_and_usage_returns_to_zero() -> None:
    pool = BlockPool(10)
    hashes = block_hashes("z" * (4 * BLOCK_CHARS), block_size=BS, salt="m")
    first = KvHolding()
    assert pool.admit(first, hashes, 0, 4)
    assert pool.usage == 0.4
    pool.commit(first, hashes)
    assert first.cached == hashes and first.private == 0
    pool.release(first)
    assert pool.usage == 0.0 and pool.cached_blocks == 4  # cached but evictable

    second = KvHolding()
    assert pool.match(hashes) == 4
    assert pool.admit(second, hashes, 3, 5)  # 3 shared + 2 new
    assert second.cached == hashes[:3] and second.private == 2
    assert pool.used_blocks == 5


def test_shared_blocks_are_counted_once() -> None:
    pool = BlockPool(10)
    hashes = block_hashes("s" * (2 * BLOCK_CHARS), block_size=BS, salt="m")
    a, b = KvHolding(), KvHolding()
    pool.admit(a, hashes, 0, 2)
    pool.commit(a, hashes)
    assert pool.admit(b, hashes, 2, 3)
    assert pool.used_blocks == 3
    pool.release(a)
    assert pool.used_blocks == 3  # b still holds the shared blocks
    pool.release(b)
    assert pool.used_blocks == 0


def test_eviction_takes_the_least_recently_freed_tail_first_and_full_pool_refuses() -> None:
    pool = BlockPool(4)
    old = block_hashes("o" * (2 * BLOCK_CHARS), block_size=BS, salt="m")
    h = KvHolding()
    pool.admit(h, old, 0, 2)
    pool.commit(h, old)
    pool.release(h)
    big = KvHolding()
    assert pool.grow(big, 3)  # 2 free + evicts one cached block
    assert pool.match(old) == 1  # the tail block went first; the head survives
    assert not pool.grow(big, 5)  # only 4 blocks exist
    assert not pool.can_admit(old, 1, 2)
    pool.release(big)
    assert pool.usage == 0.0


def test_prefix_caching_disabled_never_matches() -> None:
    pool = BlockPool(8, enable_prefix_caching=False)
    hashes = block_hashes("d" * (2 * BLOCK_CHARS), block_size=BS, salt="m")
    h = KvHolding()
    pool.admit(h, hashes, 0, 2)
    pool.commit(h, hashes)
    pool.release(h)
    assert pool.match(hashes) == 0 and pool.cached_blocks == 0
