"""prefix-cache-scorer replicated: each insertion published, a peer's applied, a bad one refused and counted."""

from __future__ import annotations

import msgpack
import pytest
from scheduling_builders import parsed, state

from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins.prefix_cache_scorer import PrefixCacheScorer
from epp.statesync.pool_sync import PoolSync
from epp.statesync.records import PLUGIN

PROMPT = "the same long system prompt, turn after turn " * 10


def _route(scorer: PrefixCacheScorer, prompt: str, target: int) -> list[float]:
    candidates = [state(1), state(2)]
    request = parsed("/v1/completions", {"model": "m", "prompt": prompt})
    cycle = CycleState()
    scores = scorer.score(cycle, request, candidates)
    scorer.pre_request(cycle, request, SchedulingResult({"default": ProfileResult([candidates[target]])}, "default"))
    return scores


def test_what_one_learns_the_other_scores() -> None:
    mine, theirs = PrefixCacheScorer("prefix"), PrefixCacheScorer("prefix")
    sent: list[bytes] = []
    mine.replicate(sent.append)
    _route(mine, PROMPT, target=1)
    (payload,) = sent
    theirs.apply_replicated(payload)
    assert len(theirs.index) == len(mine.index) > 0
    assert _route(theirs, PROMPT + "next", target=1)[1] > 0.8
    mine.replicate(None)
    _route(mine, PROMPT + "other", target=0)
    assert len(sent) == 1  # unbound: nothing more published


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",
        msgpack.packb(["default/pod-1-rank-0", 0]),
        msgpack.packb([1, 0, b"\x00" * 8]),
        msgpack.packb(["default/pod-1-rank-0", -1, b"\x00" * 8]),
        msgpack.packb(["default/pod-1-rank-0", 0, b"\x00" * 7]),
        msgpack.packb(["default/pod-1-rank-0", 0, [1, 2]]),
    ],
)
def test_a_bad_insertion_is_refused(payload: bytes) -> None:
    scorer = PrefixCacheScorer("prefix")
    with pytest.raises(ValueError, match="prefix-cache-scorer: not a prefix insertion"):
        scorer.apply_replicated(payload)
    assert len(scorer.index) == 0


def test_the_pool_sync_counts_what_it_cannot_apply_and_goes_on() -> None:
    sync = PoolSync("me", list)
    scorer = PrefixCacheScorer("prefix")
    sync.bind({"prefix": scorer})
    good = PrefixCacheScorer("prefix")
    sent: list[bytes] = []
    good.replicate(sent.append)
    _route(good, PROMPT, target=0)
    sync.receive(
        "peer", [(PLUGIN, "other-plugin", sent[0]), (PLUGIN, "prefix", b"\xc1"), (PLUGIN, "prefix", sent[0])], 1.0
    )
    assert (sync.counts.received, sync.counts.dropped_unknown, sync.counts.undecodable) == (3, 1, 1)
    assert len(scorer.index) == len(good.index)
    _route(scorer, PROMPT + "mine", target=1)
    assert sync.pending == 1  # the bound scorer publishes into the outbox
    sync.unbind()
    _route(scorer, PROMPT + "after", target=1)
    assert sync.pending == 1
