"""approx-prefix-cache-producer replicated: each insertion published, a peer's applied, a bad one refused, counted."""

from __future__ import annotations

import msgpack
import pytest
from prefix_chain import PrefixChain
from scheduling_builders import parsed, state

from epp.plugins.approx_prefix_producer import ApproxPrefixCacheProducer
from epp.statesync.pool_sync import PoolSync
from epp.statesync.records import PLUGIN

PROMPT = "the same long system prompt, turn after turn " * 40


async def _route(chain: PrefixChain, prompt: str, target: int) -> list[float]:
    return await chain.route(parsed("/v1/completions", {"model": "m", "prompt": prompt}), [state(1), state(2)], target)


async def test_what_one_learns_the_other_scores() -> None:
    mine, theirs = PrefixChain(), PrefixChain()
    sent: list[bytes] = []
    mine.producer.replicate(sent.append)
    await _route(mine, PROMPT, target=1)
    (payload,) = sent
    theirs.producer.apply_replicated(payload)
    assert len(theirs.producer.index) == len(mine.producer.index) > 0
    assert (await _route(theirs, PROMPT + "next", target=1))[1] > 0.5
    mine.producer.replicate(None)
    await _route(mine, PROMPT + "other", target=0)
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
    producer = ApproxPrefixCacheProducer()
    with pytest.raises(ValueError, match="approx-prefix-cache-producer: not a prefix insertion"):
        producer.apply_replicated(payload)
    assert len(producer.index) == 0


async def test_the_pool_sync_counts_what_it_cannot_apply_and_goes_on() -> None:
    sync = PoolSync("me", list)
    chain = PrefixChain()
    sync.bind({"approx-prefix-cache-producer": chain.producer, "prefix-cache-scorer": chain.scorer})
    good = PrefixChain()
    sent: list[bytes] = []
    good.producer.replicate(sent.append)
    await _route(good, PROMPT, target=0)
    topic = "approx-prefix-cache-producer"
    sync.receive("peer", [(PLUGIN, "other-plugin", sent[0]), (PLUGIN, topic, b"\xc1"), (PLUGIN, topic, sent[0])], 1.0)
    assert (sync.counts.received, sync.counts.dropped_unknown, sync.counts.undecodable) == (3, 1, 1)
    assert len(chain.producer.index) == len(good.producer.index)
    await _route(chain, PROMPT + "mine", target=1)
    assert sync.pending == 1  # the bound producer publishes into the outbox
    sync.unbind()
    await _route(chain, PROMPT + "after", target=1)
    assert sync.pending == 1
