"""Two replicas' syncs through a real Valkey/Redis server: prefix insertions and in-flight counts cross, a
lost server is said and survived, and what waited goes out when it is back."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import pytest_asyncio
from prefix_chain import PrefixChain
from prometheus_client import CollectorRegistry
from scheduling_builders import parsed, state

from epp.clock import SystemClock
from epp.datastore.store import Datastore
from epp.framework.endpoint import EndpointState
from epp.framework.replication import SyncSettings
from epp.statesync.metrics import SyncMetrics
from epp.statesync.replicas import ReplicaSync
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.waits import wait_until

Replica = tuple[ReplicaSync, PrefixChain, list[EndpointState]]


@pytest_asyncio.fixture
async def replicas(epp_valkey: ValkeyServer) -> AsyncIterator[Callable[[str], Replica]]:
    """``replicas(name)``: one replica's sync of pool ns/pool (two endpoints, a ``prefix-cache-scorer``)."""
    made: list[ReplicaSync] = []

    def make(name: str) -> Replica:
        states = [state(1), state(2)]
        store = Datastore()
        store.endpoints = lambda: states  # type: ignore[method-assign]  # the two endpoints of this pool
        chain = PrefixChain()
        sync = ReplicaSync(
            ("ns", "pool"),
            store,
            SyncSettings(epp_valkey.url, in_flight_interval=0.02),
            {"approx-prefix-cache-producer": chain.producer},
            clock=SystemClock(),
            metrics=SyncMetrics(CollectorRegistry()),
            source=name,
        )
        made.append(sync)
        return sync, chain, states

    yield make
    for sync in made:
        await sync.stop()


async def _connected(replicas: Callable[[str], Replica], *names: str) -> list[Replica]:
    made = [replicas(name) for name in names]
    for sync, _, _ in made:
        await sync.start()
    await wait_until(lambda: all(sync.link.connected for sync, _, _ in made), timeout=10, message="all connected")
    return made


async def _route(chain: PrefixChain, prompt: str, target: EndpointState, candidates: list[EndpointState]) -> float:
    """One routing decision for ``prompt`` to ``target``; returns ``target``'s score before it."""
    request = parsed("/v1/completions", {"model": "m", "prompt": prompt})
    return (await chain.route(request, candidates, candidates.index(target)))[candidates.index(target)]


PROMPT = "a system prompt shared by a tenant's every request " * 40


async def test_insertions_and_in_flight_counts_cross_between_replicas(
    replicas: Callable[[str], Replica],
) -> None:
    (a, a_scorer, a_states), (b, b_scorer, b_states) = await _connected(replicas, "replica-a", "replica-b")

    assert (await _route(a_scorer, PROMPT, a_states[1], a_states)) == 0.0  # a learns: the prompt is on endpoint 2
    await wait_until(
        lambda: len(b_scorer.producer.index) == len(a_scorer.producer.index),
        timeout=10,
        message="b learnt a's insertion",
    )
    assert (
        await _route(b_scorer, PROMPT + "next turn", b_states[1], b_states)
    ) > 0.5  # b scores endpoint 2 as holding it

    a_states[0].in_flight_requests, a_states[0].in_flight_tokens = 3, 300  # a routes three requests to endpoint 1
    await wait_until(lambda: b_states[0].in_flight_requests == 3, timeout=10, message="b sees a's in-flight")
    assert b_states[0].in_flight_tokens == 300
    assert b.sync.in_flight.local() == {}  # ...and does not send them back as its own
    a_states[0].in_flight_requests, a_states[0].in_flight_tokens = 0, 0
    await wait_until(lambda: b_states[0].in_flight_requests == 0, timeout=10, message="a's requests ended on b")
    assert b.sync.counts.undecodable == b.sync.counts.dropped_unknown == 0


async def test_a_replica_that_loses_the_server_says_so_routes_on_and_catches_up(
    replicas: Callable[[str], Replica], epp_valkey: ValkeyServer
) -> None:
    (a, a_scorer, a_states), (b, b_scorer, b_states) = await _connected(replicas, "replica-a", "replica-b")
    a_states[0].in_flight_requests = 2
    await wait_until(lambda: b_states[0].in_flight_requests == 2, timeout=10, message="b sees a's in-flight")

    await epp_valkey.stop()
    await wait_until(lambda: not a.link.connected and not b.link.connected, timeout=10, message="both lost it")
    assert a.link.disconnects == b.link.disconnects == 1
    assert a.link.last_error
    await wait_until(lambda: b_states[0].in_flight_requests == 0, timeout=10, message="a's stale counts dropped")
    await _route(a_scorer, PROMPT, a_states[1], a_states)  # a keeps routing and learning on its own view
    assert len(a_scorer.producer.index) > 0 and len(b_scorer.producer.index) == 0

    await epp_valkey.start()
    await wait_until(lambda: a.link.connected and b.link.connected, timeout=20, message="both back")
    await wait_until(
        lambda: len(b_scorer.producer.index) == len(a_scorer.producer.index), timeout=10, message="b caught up"
    )
    await wait_until(lambda: b_states[0].in_flight_requests == 2, timeout=10, message="a's counts are back")
    assert a.link.disconnects == 1


async def test_a_replica_starting_late_replays_what_the_stream_holds(replicas: Callable[[str], Replica]) -> None:
    a, a_scorer, a_states = replicas("replica-a")
    await a.start()
    await wait_until(lambda: a.link.connected, timeout=10, message="a connected")
    a_states[0].in_flight_requests = 5
    await _route(a_scorer, PROMPT, a_states[0], a_states)
    await wait_until(lambda: a.sync.counts.sent >= 1, timeout=10, message="a sent its insertion")
    c, c_scorer, c_states = replicas("replica-c")
    await c.start()
    await wait_until(
        lambda: len(c_scorer.producer.index) == len(a_scorer.producer.index), timeout=10, message="c replayed"
    )
    await wait_until(lambda: c_states[0].in_flight_requests == 5, timeout=10, message="c hears a's live counts")
