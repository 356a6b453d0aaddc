"""prefix-cache-scorer and its index: hashing, matching, learning, bounds and removal."""

from __future__ import annotations

import time

import pytest
from scheduling_builders import parsed

from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import PluginConfigError, PluginContext, TypedName
from epp.framework.producers import PrefixMatchInfo
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins import prefix_cache_scorer
from epp.plugins.prefix_cache_scorer import PrefixCacheScorer
from epp.plugins.prefix_index import PrefixIndex, chain_hashes


def _state(name: str, *, num_blocks: int = 0, block_size: int = 0) -> EndpointState:
    ep = Endpoint(namespace="ns", name=f"{name}-rank-0", pod_name=name, address=f"10.0.0.{len(name)}", port=8000)
    return EndpointState(ep, MetricsSnapshot(cache_num_blocks=num_blocks, cache_block_size=block_size))


def _chat(*contents: str, salt: str | None = None, model: str = "m") -> InferenceRequest:
    body: dict[str, object] = {"model": model, "messages": [{"role": "user", "content": c} for c in contents]}
    if salt is not None:
        body["cache_salt"] = salt
    return parsed("/v1/chat/completions", body)


def _route(scorer: PrefixCacheScorer, request: InferenceRequest, cands: list[EndpointState], pick: int) -> list[float]:
    cycle = CycleState()
    scores = scorer.score(cycle, request, cands)
    scorer.pre_request(cycle, request, SchedulingResult({"default": ProfileResult([cands[pick]])}, "default"))
    return scores


def test_chain_hashes_are_prefix_stable_and_seeded() -> None:
    text = b"x" * 64 * 10 + b"tail"
    a = chain_hashes(text, seed_parts=("m", ""), block_bytes=64, max_blocks=256)
    assert len(a) == 11  # ten full blocks and the partial one
    b = chain_hashes(text[: 64 * 5], seed_parts=("m", ""), block_bytes=64, max_blocks=256)
    assert a[:5] == b
    assert chain_hashes(text, seed_parts=("other", ""), block_bytes=64, max_blocks=256)[0] != a[0]
    assert chain_hashes(text, seed_parts=("m", "salt"), block_bytes=64, max_blocks=256)[0] != a[0]
    assert chain_hashes(b"short", seed_parts=("m", ""), block_bytes=64, max_blocks=256) == []
    assert len(chain_hashes(text, seed_parts=("m", ""), block_bytes=64, max_blocks=3)) == 3


def test_tiny_block_size_is_bounded() -> None:
    hashes = chain_hashes(b"a" * 100_000, seed_parts=("m", ""), block_bytes=1, max_blocks=256)
    assert len(hashes) == 256


def test_shared_prefix_sticks_to_the_pod_that_served_it() -> None:
    scorer = PrefixCacheScorer("p")
    cands = [_state("a"), _state("b")]
    system = "You are a helpful assistant. " * 40  # ~1.2 KB shared system prompt
    first = _route(scorer, _chat(system, "question one"), cands, pick=1)
    assert first == [0.0, 0.0]
    second = _route(scorer, _chat(system, "a different question"), cands, pick=1)
    assert second[0] == 0.0
    assert 0.8 < second[1] < 1.0  # the whole system prompt matched, the question did not
    same = _route(scorer, _chat(system, "question one"), cands, pick=1)
    assert same == [0.0, 1.0]


def test_cache_salt_isolates_prefixes() -> None:
    scorer = PrefixCacheScorer("p")
    cands = [_state("a"), _state("b")]
    prompt = "shared prefix " * 100
    _route(scorer, _chat(prompt), cands, pick=0)
    salted = _route(scorer, _chat(prompt, salt="tenant-1"), cands, pick=1)
    assert salted == [0.0, 0.0]
    assert _route(scorer, _chat(prompt, salt="tenant-1"), cands, pick=1)[1] == 1.0


def test_lru_capacity_bounds_memory_and_evicts_oldest() -> None:
    index = PrefixIndex(default_capacity=4)
    index.add("e", [1, 2, 3])
    index.add("e", [4, 5])
    assert len(index) == 4
    assert index.match("e", [1]) == 0  # evicted
    assert index.match("e", [2, 3, 4, 5]) == 4
    index.add("e", [10, 11], capacity=2)  # capacity from the pod's num_gpu_blocks
    assert len(index) == 2


def test_capacity_comes_from_scraped_num_gpu_blocks() -> None:
    scorer = PrefixCacheScorer("p")
    cands = [_state("a", num_blocks=3)]
    _route(scorer, _chat("q" * 64 * 10), cands, pick=0)
    assert scorer.index_size == 3


def test_removed_endpoint_frees_its_index() -> None:
    scorer = PrefixCacheScorer("p")
    cands = [_state("a"), _state("b")]
    _route(scorer, _chat("p" * 1000), cands, pick=0)
    _route(scorer, _chat("q" * 1000), cands, pick=1)
    assert set(scorer.index.endpoints) == {"ns/a-rank-0", "ns/b-rank-0"}
    scorer.endpoints_removed(["ns/a-rank-0"])
    assert set(scorer.index.endpoints) == {"ns/b-rank-0"}


def test_factory_validates_parameters() -> None:
    ctx = PluginContext()
    scorer = prefix_cache_scorer.create("p", {"blockSizeTokens": 8, "maxPrefixTokensToMatch": 80}, ctx)
    assert scorer.max_prefix_blocks == 10
    with pytest.raises(PluginConfigError, match="blockSizeTokens"):
        prefix_cache_scorer.create("p", {"blockSizeTokens": 0}, ctx)
    with pytest.raises(PluginConfigError, match="unknown"):
        prefix_cache_scorer.create("p", {"bogus": 1}, ctx)
    with pytest.raises(PluginConfigError, match="deprecated"):
        prefix_cache_scorer.create("p", {"blockSize": 64}, ctx)


def test_large_prompt_hashes_only_the_bounded_prefix() -> None:
    scorer = PrefixCacheScorer("p")
    req = parsed("/v1/completions", {"model": "m", "prompt": "w" * 220_000})
    cycle = CycleState()
    start = time.perf_counter()
    hashes = scorer.hashes(cycle, req, [_state("a")])
    assert len(hashes) == 256
    assert time.perf_counter() - start < 1.0  # sanity bound only; speed is measured by epp bench


class _Producer:
    """A prefix-match producer with info for requests that carry token ids only."""

    typed_name = TypedName("p", "p")

    def prefix_match(
        self, cycle: CycleState, request: InferenceRequest, candidates: list[EndpointState]
    ) -> PrefixMatchInfo | None:
        if request.token_ids is None:
            return None
        return PrefixMatchInfo([0, 3], total_blocks=4, block_size_tokens=16)


def test_match_info_producer_scores_and_the_approximate_index_is_the_fallback() -> None:
    scorer = prefix_cache_scorer.create(
        "s",
        {"prefixMatchInfoProducerName": "p", "matchLengthWeight": 0.5, "matchLengthScaleTokens": 96},
        PluginContext(),
    )
    producer = _Producer()
    scorer.resolve_references(lambda where, name: producer)
    cands = [_state("a"), _state("b")]
    with_tokens = _chat("x" * 400)
    with_tokens.token_ids = list(range(64))
    # 0.5 · min(1, 3·16/96)² + 0.5 · 3/4
    assert scorer.score(CycleState(), with_tokens, cands) == [0.0, 0.5 * 0.25 + 0.5 * 0.75]
    # No tokens (tokenization failed): the approximate index, which learnt from the last decision.
    _route(scorer, _chat("x" * 400), cands, pick=0)
    assert scorer.score(CycleState(), _chat("x" * 400), cands)[0] > 0
    with pytest.raises(PluginConfigError, match="not a producer of prefix-match info"):
        scorer.resolve_references(lambda where, name: prefix_cache_scorer.create("other", {}, PluginContext()))
