"""session-id-producer (header or cookie → SessionIDDataKey) and burst-prefix-cache-producer (a window of
requests sharing prompts assigned jointly; its assignment rules as upstream's)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from scheduling_builders import parsed

from epp.clock import ManualClock
from epp.framework.data import DataScope
from epp.framework.data_keys import PrefixCacheMatches
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.plugins import burst_prefix_producer, session_id_producer
from epp.plugins._burst_assign import Entry, assign
from epp.plugins.burst_prefix_producer import BatchFullError, BurstPrefixCacheProducer
from epp.plugins.token_estimate import EstimatingTokenProducer
from epp_sim.waits import wait_until


def _state(name: str, running: int = 0) -> EndpointState:
    ep = Endpoint(namespace="ns", name=name, pod_name=name, address="10.0.0.1", port=8000)
    return EndpointState(ep, MetricsSnapshot(running=running))


# -- session-id-producer ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "headers", "session"),
    [
        ({"headerName": "X-Session-ID"}, {"x-session-id": " abc "}, "abc"),
        ({"cookieName": "llm-d-session"}, {"cookie": "a=1; llm-d-session=s-42; b=2"}, "s-42"),
        ({"cookieName": "llm-d-session"}, {"cookie": "llm-d-sessionx=1"}, None),
        ({"headerName": "x-session-id"}, {}, None),
    ],
)
async def test_session_id_comes_from_the_header_or_the_cookie(
    params: dict[str, str], headers: dict[str, str], session: str | None
) -> None:
    producer = session_id_producer.create("sid", params, PluginContext())
    producer.bind_data_scope(DataScope.of(producer))
    request = InferenceRequest("r", headers=headers)
    await producer.produce(request, [])
    assert request.attributes.get("SessionIDDataKey/sid") == session


@pytest.mark.parametrize("params", [{}, {"headerName": "a", "cookieName": "b"}, {"headerName": "  "}])
def test_session_id_needs_exactly_one_source(params: dict[str, str]) -> None:
    with pytest.raises(PluginConfigError, match="exactly one of headerName and cookieName"):
        session_id_producer.create("sid", params, PluginContext())


# -- the assignment ---------------------------------------------------------------------------------


def _entries(*prompts: Sequence[int], replicas: Sequence[EndpointState]) -> list[Entry]:
    return [Entry(list(p), replicas) for p in prompts]


def _where(entries: Sequence[Entry]) -> list[str | None]:
    return [e.assigned.endpoint.name if e.assigned is not None else None for e in entries]


def test_identical_prompts_go_together_and_singletons_get_nothing() -> None:
    replicas = [_state("a"), _state("b")]
    entries = _entries([1, 2], [1, 2], [1, 2], [9], [], replicas=replicas)
    assign(entries, max_per_replica=-1, min_colocate=0, by_tokens=False)
    assert _where(entries) == ["a", "a", "a", None, None]


def test_a_cap_per_replica_spills_the_group_to_the_least_loaded() -> None:
    replicas = [_state("a"), _state("b", running=5), _state("c")]
    entries = _entries(*([[1, 2]] * 5), replicas=replicas)
    assign(entries, max_per_replica=2, min_colocate=0, by_tokens=False)
    assert _where(entries) == ["a", "a", "c", "c", "b"]  # ties by running requests, then name


def test_groups_balance_and_prefix_sharing_units_colocate_under_the_fair_share() -> None:
    replicas = [_state("a"), _state("b")]
    # Two groups sharing the first 2 blocks, one unrelated group, and a single sharing them too.
    entries = _entries([1, 2, 3], [1, 2, 3], [1, 2, 4], [1, 2, 4], [7, 8], [7, 8], [1, 2, 5], replicas=replicas)
    assign(entries, max_per_replica=-1, min_colocate=2, by_tokens=False)
    where = _where(entries)
    assert where[0] == where[1] and where[2] == where[3] and where[4] == where[5]
    assert where[0] == where[2]  # the two groups share 2 blocks: one replica prefills them once
    assert where[4] != where[0]  # the unrelated group balances onto the other replica
    assert where[6] is not None  # the single shares 2 leading blocks with others: it gets a replica
    without = _entries([1, 2, 3], [1, 2, 3], [9, 9], replicas=replicas)
    assign(without, max_per_replica=-1, min_colocate=0, by_tokens=False)
    assert _where(without)[2] is None  # min_colocate 0: only identical groups are placed


def test_token_balancing_charges_only_the_blocks_a_replica_does_not_hold() -> None:
    replicas = [_state("a"), _state("b")]
    long_, short = list(range(1, 11)), [1, 2]
    entries = _entries(long_, long_, short, short, [20, 21, 22], [20, 21, 22], replicas=replicas)
    assign(entries, max_per_replica=-1, min_colocate=0, by_tokens=True)
    where = _where(entries)
    assert where[0] != where[4]  # the long unit (10 blocks) and the next one spread
    assert where[2] == where[4]  # the 2-block unit joins the lighter replica


# -- the producer -----------------------------------------------------------------------------------


async def _through(producer: BurstPrefixCacheProducer, prompts: Sequence[str], replicas: Sequence[EndpointState]):
    tokens = EstimatingTokenProducer("token-producer")
    producer.bind_data_scope(DataScope.of(producer))
    requests = [parsed("/v1/completions", {"model": "m", "prompt": p}) for p in prompts]
    for request in requests:
        await tokens.produce(request, replicas)
    clock = producer.clock
    assert isinstance(clock, ManualClock)
    running = [asyncio.ensure_future(producer.produce(r, replicas)) for r in requests]
    await wait_until(lambda: clock.sleepers == 1, message="the first request holds the window open on the clock")
    window = producer._open
    assert window is not None
    # Every request joined the window, or was refused (a full window answers at once).
    await wait_until(lambda: len(window.entries) + sum(t.done() for t in running) == len(requests))
    clock.advance(producer.window)
    results = await asyncio.gather(*running, return_exceptions=True)
    return requests, results


async def test_a_window_of_identical_prompts_is_published_as_a_full_match_on_one_replica() -> None:
    clock = ManualClock()
    producer = burst_prefix_producer.create("burst", {"windowDurationMs": 50}, PluginContext(clock=clock))
    replicas = [_state("a"), _state("b")]
    prompt = "rollout prompt " * 40
    requests, results = await _through(producer, [prompt] * 4 + ["lonely " * 40], replicas)
    assert results == [None] * 5
    infos = [r.attributes["PrefixCacheMatchInfoDataKey/burst"] for r in requests]
    assert all(isinstance(i, PrefixCacheMatches) for i in infos)
    assert {tuple(i.matches.items()) for i in infos[:4]} == {(("ns/a", infos[0].total_blocks),)}
    assert infos[4].matches == {}  # overlaps nothing: no affinity
    assert producer._open is None  # the window closed


async def test_a_full_window_refuses_further_requests_and_a_cancelled_first_still_seals() -> None:
    clock = ManualClock()
    producer = burst_prefix_producer.create("burst", {"maxBatchSize": 2}, PluginContext(clock=clock))
    replicas = [_state("a")]
    requests, results = await _through(producer, ["same " * 80] * 3, replicas)
    assert results[:2] == [None, None] and isinstance(results[2], BatchFullError)
    assert "PrefixCacheMatchInfoDataKey/burst" not in requests[2].attributes
    # The first request of a window is cancelled while it holds it: the others are released all the same.
    request = parsed("/v1/completions", {"model": "m", "prompt": "x" * 400})
    await EstimatingTokenProducer("t").produce(request, replicas)
    first = asyncio.ensure_future(producer.produce(request, replicas))
    await wait_until(lambda: clock.sleepers == 1)
    second = asyncio.ensure_future(producer.produce(request, replicas))
    await wait_until(lambda: producer._open is not None and len(producer._open.entries) == 2)
    first.cancel()
    assert await second is None and first.cancelled()


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"windowDurationMs": 0}, "windowDurationMs"),
        ({"windowDurationMs": 10_001}, "windowDurationMs"),
        ({"maxPerReplica": 0}, "maxPerReplica"),
        ({"blockSizeTokens": 0}, "blockSizeTokens"),
        ({"maxPrefixTokensToMatch": 10}, "maxPrefixTokensToMatch"),
        ({"minColocateBlocks": -1}, "minColocateBlocks"),
        ({"maxBatchSize": 0}, "maxBatchSize"),
        ({"balanceBy": "bytes"}, "balanceBy"),
        ({"window": 1}, "unknown"),
    ],
)
def test_burst_parameters_are_checked_as_upstream(params: dict[str, object], field: str) -> None:
    with pytest.raises(PluginConfigError, match=field):
        burst_prefix_producer.create("b", params, PluginContext())
