"""The precise index on a real Valkey/Redis server: the in-memory index's semantics, several writers at once,
a lost, slow or full server, and keys kept apart per pool and producer."""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable, Sequence

import pytest
import pytest_asyncio
import redis.asyncio as aioredis

from epp.kvevents.decode import AllBlocksCleared, BlockRemoved, BlockStored
from epp.kvevents.index import KvBlockIndex, block_keys, chain_seed
from epp.kvevents.redis_index import RedisBlockIndex
from epp.kvevents.redis_layout import RedisIndexSettings
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.waits import wait_until

MODEL = "m"
PODS = ("ns/a", "ns/b", "ns/c")
Event = BlockStored | BlockRemoved | AllBlocksCleared


@pytest_asyncio.fixture
async def make(epp_valkey: ValkeyServer) -> AsyncIterator[Callable[..., RedisBlockIndex]]:
    """``make(pool=..., producer=..., max_queued=...)``: a started index on the test's server (stopped after)."""
    made: list[RedisBlockIndex] = []

    def build(*, pool: str = "pool", producer: str = "p", max_queued: int = 200_000) -> RedisBlockIndex:
        index = RedisBlockIndex(
            RedisIndexSettings.from_address(epp_valkey.url, "valkey"),
            16,
            pool=pool,
            producer=producer,
            max_queued=max_queued,
        )
        index.start()
        made.append(index)
        return index

    yield build
    for index in made:
        await index.stop()


async def _ready(*indexes: RedisBlockIndex) -> None:
    await wait_until(lambda: all(i.connected for i in indexes), timeout=10, message="index connected")


async def _flushed(*indexes: RedisBlockIndex) -> None:
    await wait_until(lambda: all(i.flushed for i in indexes), timeout=10, message="writes flushed")


def _apply(index: KvBlockIndex | RedisBlockIndex, pod: str, event: Event) -> None:
    if isinstance(event, BlockStored):
        index.stored(pod, MODEL, event)
    elif isinstance(event, BlockRemoved):
        index.removed(pod, event.block_hashes)
    else:
        index.clear(pod)


def _history(seed: int) -> tuple[list[tuple[str, Event]], list[list[int]]]:
    """Random chains per pod (engine blocks of 32 tokens: two keys each), removals, clears, re-stores;
    and the token prefixes every chain began, to ask about."""
    rng = random.Random(seed)
    events: list[tuple[str, Event]] = []
    prompts: list[list[int]] = []
    tails: dict[str, list[int]] = {p: [] for p in PODS}
    next_hash = 1
    for _ in range(120):
        pod = rng.choice(PODS)
        roll = rng.random()
        if roll < 0.6:  # a chain: a new one, or one continuing a block this pod stored
            if tails[pod] and rng.random() < 0.5:
                parent = rng.choice(tails[pod])
                prompt = None
            else:
                parent = None
                prompt = rng.choice(prompts) if prompts and rng.random() < 0.5 else None
            blocks = rng.randint(1, 4)
            tokens = (prompt or [rng.randrange(50_000) for _ in range(32 * blocks)])[: 32 * blocks]
            blocks = len(tokens) // 32
            if blocks == 0:
                continue
            tokens = tokens[: 32 * blocks]
            hashes = tuple(range(next_hash, next_hash + blocks))
            next_hash += blocks
            events.append((pod, BlockStored(hashes, parent, tuple(tokens), 32)))
            tails[pod].extend(hashes)
            if parent is None:
                prompts.append(tokens)
        elif roll < 0.85 and tails[pod]:
            gone = rng.sample(tails[pod], min(len(tails[pod]), rng.randint(1, 3)))
            events.append((pod, BlockRemoved(tuple(gone))))
        elif roll < 0.9:
            events.append((pod, AllBlocksCleared()))
            tails[pod] = []
    events.append(("ns/a", BlockStored((10**9,), 777_777, tuple(range(32)), 32)))  # unknown parent: skipped
    events.append(("ns/a", BlockStored((10**9 + 1,), None, tuple(range(24)), 24)))  # not a multiple of 16
    return events, prompts


def _asked(prompts: Sequence[list[int]]) -> list[list[int]]:
    return [block_keys(p, 16, chain_seed(MODEL)) for p in prompts]


async def test_same_answers_as_the_in_memory_index_with_two_writers_at_once(
    make: Callable[..., RedisBlockIndex],
) -> None:
    """Per-pod discovery: every replica hears every event and writes it; the server ends as one index would."""
    first, second = make(), make()
    await _ready(first, second)
    events, prompts = _history(7)
    memory = KvBlockIndex(16, max_entries=10**9)
    for pod, event in events:
        _apply(memory, pod, event)
        _apply(first, pod, event)
        _apply(second, pod, event)
    await _flushed(first, second)
    assert first.skipped == second.skipped == memory.skipped >= 2
    asked = _asked(prompts)
    hits = 0
    for keys in asked:
        expected = [memory.longest_prefix(pod, keys) for pod in PODS]
        hits += sum(expected)
        assert await first.longest_prefixes(keys, PODS) == expected
        assert await second.longest_prefixes(keys, list(reversed(PODS))) == expected[::-1]
    assert hits > 0  # the history leaves something to find
    await wait_until(
        lambda: {p: first.blocks(p) for p in PODS} == {p: memory.blocks(p) for p in PODS},
        timeout=10,
        message="blocks per endpoint read back",
    )
    assert len(first) == len(memory)


async def test_a_removal_keeps_a_key_another_stored_block_covers(make: Callable[..., RedisBlockIndex]) -> None:
    index = make()
    await _ready(index)
    tokens = tuple(range(32))
    index.stored("ns/a", MODEL, BlockStored((1,), None, tokens, 32))
    index.stored("ns/a", MODEL, BlockStored((2,), None, tokens, 32))  # same content under another engine block
    index.removed("ns/a", [1])
    await _flushed(index)
    keys = block_keys(tokens, 16, chain_seed(MODEL))
    assert await index.longest_prefixes(keys, ["ns/a", "ns/b"]) == [2, 0]
    index.removed("ns/a", [2])
    await _flushed(index)
    assert await index.longest_prefixes(keys, ["ns/a"]) == [0]


async def test_a_chain_continues_from_a_parent_another_replica_stored(make: Callable[..., RedisBlockIndex]) -> None:
    """Central mode after a failover: the parent's keys are read back from the server, not from memory."""
    first, second = make(), make()
    await _ready(first, second)
    tokens = [random.Random(3).randrange(1000) for _ in range(64)]
    first.stored("ns/a", MODEL, BlockStored((1,), None, tuple(tokens[:32]), 32))
    await _flushed(first)
    second.stored("ns/a", MODEL, BlockStored((2,), 1, tuple(tokens[32:]), 32))
    await _flushed(second)
    assert second.skipped == 0
    assert await first.longest_prefixes(block_keys(tokens, 16, chain_seed(MODEL)), ["ns/a"]) == [4]


async def test_pools_and_producers_do_not_share_keys(make: Callable[..., RedisBlockIndex]) -> None:
    mine, other_pool, other_producer = make(), make(pool="other"), make(producer="q")
    await _ready(mine, other_pool, other_producer)
    tokens = tuple(range(32))
    mine.stored("ns/a", MODEL, BlockStored((1,), None, tokens, 32))
    await _flushed(mine)
    keys = block_keys(tokens, 16, chain_seed(MODEL))
    assert await mine.longest_prefixes(keys, ["ns/a"]) == [2]
    assert await other_pool.longest_prefixes(keys, ["ns/a"]) == [0]
    assert await other_producer.longest_prefixes(keys, ["ns/a"]) == [0]


async def test_speculative_entries_are_seen_by_every_replica_until_they_expire(
    make: Callable[..., RedisBlockIndex], epp_valkey: ValkeyServer
) -> None:
    first, second = make(), make()
    await _ready(first, second)
    keys = block_keys(list(range(64)), 16, chain_seed(MODEL))
    first.speculate("ns/b", keys, 0.2)
    await _flushed(first)
    assert await second.longest_prefixes(keys, ["ns/a", "ns/b"]) == [0, 4]

    async def expired() -> bool:
        return await second.longest_prefixes(keys, ["ns/b"]) == [0]

    await wait_until(expired, timeout=10, message="speculative entries expired")
    first.stored("ns/a", MODEL, BlockStored((1,), None, tuple(range(32)), 32))  # the next write deletes them
    await _flushed(first)
    async with aioredis.Redis.from_url(epp_valkey.url) as client:
        assert await client.zcard(f"{first.prefix}:spec") == 0
        assert await client.hlen(f"{first.prefix}:s:ns/b") == 0


async def test_a_lost_server_answers_nothing_then_catches_up(
    make: Callable[..., RedisBlockIndex], epp_valkey: ValkeyServer
) -> None:
    index = make()
    await _ready(index)
    tokens = tuple(range(32))
    keys = block_keys(tokens, 16, chain_seed(MODEL))
    await epp_valkey.stop()
    await wait_until(lambda: not index.connected, timeout=10, message="loss seen")
    assert await index.longest_prefixes(keys, ["ns/a"]) is None
    assert index.lookup_failures == 1 and index.disconnects == 1
    index.stored("ns/a", MODEL, BlockStored((1,), None, tokens, 32))  # waits in the queue
    assert not index.flushed
    await epp_valkey.start()  # an empty server: the queued write is what it will hold
    await _ready(index)
    await _flushed(index)
    assert await index.longest_prefixes(keys, ["ns/a"]) == [2]


async def test_a_slow_server_answers_nothing_in_time(
    make: Callable[..., RedisBlockIndex], epp_valkey: ValkeyServer
) -> None:
    index = make()
    await _ready(index)
    keys = block_keys(tuple(range(32)), 16, chain_seed(MODEL))
    async with aioredis.Redis.from_url(epp_valkey.url) as client:
        await client.execute_command("CLIENT", "PAUSE", 300, "ALL")
        assert await index.longest_prefixes(keys, ["ns/a"]) is None
        assert index.lookup_failures == 1
        assert index.connected  # slow is not gone

    async def answers() -> bool:
        return await index.longest_prefixes(keys, ["ns/a"]) == [0]

    await wait_until(answers, timeout=10, message="answers again after the pause")


async def test_a_full_queue_drops_and_clears_the_endpoint_when_the_server_is_back(
    make: Callable[..., RedisBlockIndex], epp_valkey: ValkeyServer
) -> None:
    index = make(max_queued=3)
    await _ready(index)
    kept = tuple(range(32))
    index.stored("ns/a", MODEL, BlockStored((1,), None, kept, 32))
    await _flushed(index)
    async with aioredis.Redis.from_url(epp_valkey.url) as client:
        await client.execute_command("CLIENT", "PAUSE", 500, "WRITE")  # writes wait; the queue fills
        for i in range(2, 8):
            index.stored("ns/a", MODEL, BlockStored((i,), None, tuple(range(i * 100, i * 100 + 32)), 32))
        assert index.dropped >= 3
    await _flushed(index)
    for tokens in (kept, tuple(range(700, 732))):  # what it held, and what was dropped: unknown, so cleared
        assert await index.longest_prefixes(block_keys(tokens, 16, chain_seed(MODEL)), ["ns/a"]) == [0]


def test_addresses_are_read_as_llm_d_reads_them() -> None:
    assert RedisIndexSettings.from_address("valkeys://h:7000", "valkey").url == "rediss://h:7000"
    assert RedisIndexSettings.from_address("h:7000", "redis").url == "redis://h:7000"
    with pytest.raises(ValueError, match="scheme 'http'"):
        RedisIndexSettings.from_address("http://h:1", "redis")
