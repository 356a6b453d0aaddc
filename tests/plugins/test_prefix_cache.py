"""approx-prefix-cache-producer and prefix-cache-scorer: hashing, matching, learning, bounds, removal, scoring."""

from __future__ import annotations

import pytest
from prefix_chain import PrefixChain
from scheduling_builders import parsed

from epp.framework.data import DataScope
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, PrefixCacheMatches
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins import approx_prefix_producer, prefix_cache_scorer
from epp.plugins.approx_prefix_producer import ApproxPrefixCacheProducer
from epp.plugins.prefix_index import PrefixIndex, chain_hashes

BLOCK = 64 * 4  # the producer's floor: 64 tokens of 4 prompt bytes


def _state(name: str, *, num_blocks: int = 0, block_size: int = 0) -> EndpointState:
    ep = Endpoint(namespace="ns", name=f"{name}-rank-0", pod_name=name, address=f"10.0.0.{len(name)}", port=8000)
    return EndpointState(ep, MetricsSnapshot(cache_num_blocks=num_blocks, cache_block_size=block_size))


def _chat(*contents: str, salt: str | None = None, model: str = "m") -> InferenceRequest:
    body: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": c} for c in contents]}
    if salt is not None:
        body["cache_salt"] = salt
    return parsed("/v1/chat/completions", body)


def test_chain_hashes_are_prefix_stable_and_seeded() -> None:
    text = b"x" * 64 * 10 + b"tail"
    a = chain_hashes(text, seed_parts=("m", ""), block_bytes=64, max_blocks=256)
    assert len(a) == 11  # ten full blocks and the partial one
    b = chain_hashes(text[: 64 * 5], seed_parts=("m", ""), block_bytes=64, max_blocks=256)
    assert a[:5] == b
    assert chain_hashes(text, seed_parts=("other", ""), block_bytes=64, max_blocks=256)[0] != a[0]
    assert chain_hashes(text, seed_parts=("m", "salt"), block_bytes=64, max_blocks=256)[0] != a[0]
    assert chain_hashes(b"short", seed_parts=("m", ""), block_bytes=64, max_blocks=256) == []
    assert len(chain_hashes(b"short", seed_parts=("m", ""), block_bytes=64, max_blocks=256, short=True)) == 1
    assert len(chain_hashes(text, seed_parts=("m", ""), block_bytes=64, max_blocks=3)) == 3


def test_tiny_block_size_is_bounded() -> None:
    hashes = chain_hashes(b"a" * 100_000, seed_parts=("m", ""), block_bytes=1, max_blocks=256)
    assert len(hashes) == 256


async def test_shared_prefix_sticks_to_the_pod_that_served_it() -> None:
    chain = PrefixChain()
    cands = [_state("a"), _state("b")]
    system = "You are a helpful assistant. " * 120  # ~3.5 KB shared system prompt: 13 blocks of 256 bytes
    first = await chain.route(_chat(system, "question one"), cands, pick=1)
    assert first == [0.0, 0.0]
    second = await chain.route(_chat(system, "a different question"), cands, pick=1)
    assert second[0] == 0.0
    assert 0.8 < second[1] < 1.0  # the whole system prompt matched, the question did not
    same = await chain.route(_chat(system, "question one"), cands, pick=1)
    assert same == [0.0, 1.0]


async def test_a_prompt_shorter_than_a_block_is_one_block() -> None:
    chain = PrefixChain()
    cands = [_state("a"), _state("b")]
    await chain.route(_chat("hi"), cands, pick=0)
    assert await chain.route(_chat("hi"), cands, pick=0) == [1.0, 0.0]
    assert await chain.route(_chat("ho"), cands, pick=0) == [0.0, 0.0]


async def test_cache_salt_isolates_prefixes() -> None:
    chain = PrefixChain()
    cands = [_state("a"), _state("b")]
    prompt = "shared prefix " * 100
    await chain.route(_chat(prompt), cands, pick=0)
    salted = await chain.route(_chat(prompt, salt="tenant-1"), cands, pick=1)
    assert salted == [0.0, 0.0]
    assert (await chain.route(_chat(prompt, salt="tenant-1"), cands, pick=1))[1] == 1.0


def test_lru_capacity_bounds_memory_and_evicts_oldest() -> None:
    index = PrefixIndex(default_capacity=4)
    index.add("e", [1, 2, 3])
    index.add("e", [4, 5])
    assert len(index) == 4
    assert index.match("e", [1]) == 0  # evicted
    assert index.match("e", [2, 3, 4, 5]) == 4
    index.add("e", [10, 11], capacity=2)  # capacity from the pod's num_gpu_blocks
    assert len(index) == 2


async def test_capacity_and_block_size_come_from_the_scraped_cache_config() -> None:
    chain = PrefixChain()
    await chain.route(_chat("q" * BLOCK * 10), [_state("a", num_blocks=3)], pick=0)
    assert chain.producer.index_size == 3
    # autoTune: the endpoints' block size (above the floor) sets the block; without autoTune the parameter does.
    assert chain.producer.block_size([_state("a", block_size=128)]) == 128
    assert chain.producer.block_size([_state("a", block_size=16)]) == 64  # vLLM's 16 is held at the floor
    fixed = approx_prefix_producer.create("p", {"autoTune": False, "blockSizeTokens": 100}, PluginContext())
    assert fixed.block_size([_state("a", block_size=128)]) == 100
    unbounded = ApproxPrefixCacheProducer(auto_tune=False, lru_capacity_per_server=2)
    await PrefixChain(unbounded).route(_chat("q" * BLOCK * 10), [_state("a", num_blocks=3)], pick=0)
    assert unbounded.index_size == 2  # autoTune off: lruCapacityPerServer, not the pod's count


async def test_the_prefill_profile_pick_learns_too() -> None:
    chain = PrefixChain()
    cands = [_state("a"), _state("b"), _state("c")]
    request = _chat("p" * 2000)
    await chain.tokens.produce(request, cands)
    await chain.producer.produce(request, cands)
    result = SchedulingResult(
        {"decode": ProfileResult([cands[0]]), "prefill": ProfileResult([cands[1]]), "other": ProfileResult([cands[2]])},
        "decode",
    )
    chain.producer.pre_request(CycleState(), request, result)
    assert set(chain.producer.index.endpoints) == {"ns/a-rank-0", "ns/b-rank-0"}


async def test_removed_endpoint_frees_its_index() -> None:
    chain = PrefixChain()
    cands = [_state("a"), _state("b")]
    await chain.route(_chat("p" * 1000), cands, pick=0)
    await chain.route(_chat("q" * 1000), cands, pick=1)
    assert set(chain.producer.index.endpoints) == {"ns/a-rank-0", "ns/b-rank-0"}
    chain.producer.endpoints_removed(["ns/a-rank-0"])
    assert set(chain.producer.index.endpoints) == {"ns/b-rank-0"}


def test_producer_factory_reads_upstreams_parameters() -> None:
    ctx = PluginContext()
    producer = approx_prefix_producer.create("p", {"maxPrefixTokensToMatch": 1280}, ctx)
    assert producer.max_blocks(64) == 20
    assert approx_prefix_producer.create("p", {}, ctx).max_blocks(64) == 131072 // 64
    assert approx_prefix_producer.create("p", {"maxPrefixTokensToMatch": 0}, ctx).max_blocks(64) == 2048
    both_zero = {"maxPrefixTokensToMatch": 0, "maxPrefixBlocksToMatch": 0}
    assert approx_prefix_producer.create("p", both_zero, ctx).max_blocks(64) > 10**9  # the whole prompt
    assert approx_prefix_producer.create("p", {"blockSize": 100, "autoTune": False}, ctx).block_size([]) == 100
    with pytest.raises(PluginConfigError, match="blockSizeTokens"):
        approx_prefix_producer.create("p", {"blockSizeTokens": 0, "autoTune": False}, ctx)
    with pytest.raises(PluginConfigError, match="unknown"):
        approx_prefix_producer.create("p", {"bogus": 1}, ctx)


def test_scorer_refuses_the_index_settings_naming_the_producer() -> None:
    ctx = PluginContext()
    with pytest.raises(PluginConfigError, match="blockSizeTokens: .*approx-prefix-cache-producer"):
        prefix_cache_scorer.create("p", {"blockSizeTokens": 8}, ctx)
    with pytest.raises(PluginConfigError, match="unknown"):
        prefix_cache_scorer.create("p", {"bogus": 1}, ctx)
    with pytest.raises(PluginConfigError, match="matchLengthScaleTokens"):
        prefix_cache_scorer.create("p", {"matchLengthWeight": 0.5, "matchLengthScaleTokens": 0}, ctx)


async def test_large_prompt_hashes_only_the_bounded_prefix() -> None:
    producer = approx_prefix_producer.create("p", {"maxPrefixTokensToMatch": 64 * 256}, PluginContext())
    chain = PrefixChain(producer)
    request = parsed("/v1/completions", {"model": "m", "prompt": "w" * 220_000})
    await chain.route(request, [_state("a")], pick=0)
    info = request.attributes[producer.key.id]
    assert info.total_blocks == 256


async def test_scorer_reads_the_producer_it_names_with_the_match_length_term() -> None:
    scorer = prefix_cache_scorer.create(
        "s",
        {"prefixMatchInfoProducerName": "p", "matchLengthWeight": 0.5, "matchLengthScaleTokens": 96},
        PluginContext(),
    )
    scorer.bind_data_scope(DataScope.of(scorer))
    cands = [_state("a"), _state("b")]
    request = _chat("x")
    request.attributes[PREFIX_CACHE_MATCH_INFO.named("p").id] = PrefixCacheMatches({"ns/b-rank-0": 3}, 4, 16)
    # 0.5 · min(1, 3·16/96)² + 0.5 · 3/4
    assert scorer.score(CycleState(), request, cands) == [0.0, 0.5 * 0.25 + 0.5 * 0.75]
    # No match info (the producer had no tokens): 0 everywhere, as upstream.
    assert scorer.score(CycleState(), _chat("x"), cands) == [0.0, 0.0]
