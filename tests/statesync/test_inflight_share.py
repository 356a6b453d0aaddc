"""The peers' in-flight counts on the pool's endpoints: replaced whole, taken out with a peer, followed on churn."""

from __future__ import annotations

from scheduling_builders import state

from epp.statesync.inflight import InFlightShare


def test_peer_counts_add_to_the_endpoints_and_replace_their_previous_ones() -> None:
    a, b = state(1), state(2)
    a.in_flight_requests, a.in_flight_tokens = 3, 30  # this picker's own
    share = InFlightShare(lambda: [a, b])
    share.apply("peer-1", {a.endpoint.key: (2, 20)}, now=1.0)
    share.apply("peer-2", {a.endpoint.key: (1, 10), b.endpoint.key: (4, 40)}, now=1.0)
    assert (a.in_flight_requests, a.in_flight_tokens, b.in_flight_requests) == (6, 60, 4)
    assert share.local() == {a.endpoint.key: (3, 30)}  # what this picker itself sends out

    share.apply("peer-2", {b.endpoint.key: (1, 10)}, now=2.0)  # whole: nothing on a any more
    assert (a.in_flight_requests, b.in_flight_requests, b.in_flight_tokens) == (5, 1, 10)
    assert share.local() == {a.endpoint.key: (3, 30)}


def test_a_silent_peer_is_dropped_with_its_counts() -> None:
    a = state(1)
    share = InFlightShare(lambda: [a])
    share.apply("quiet", {a.endpoint.key: (2, 20)}, now=1.0)
    share.apply("chatty", {a.endpoint.key: (1, 10)}, now=4.0)
    assert share.expire(now=4.5, after=3.0) == ["quiet"]
    assert (a.in_flight_requests, a.in_flight_tokens) == (1, 10)
    assert share.peers == frozenset({"chatty"})


def test_endpoints_joining_get_the_peers_counts_and_leaving_take_them_along() -> None:
    a = state(1)
    share = InFlightShare(list)
    share.apply("peer", {a.endpoint.key: (2, 20)}, now=1.0)  # heard of before this picker discovered it
    share.endpoints_changed([a], [])
    assert (a.in_flight_requests, a.in_flight_tokens) == (2, 20)
    replacement = state(1)  # the same key, a new state object (a pod's address changed)
    share.endpoints_changed([replacement], [a])
    assert replacement.in_flight_requests == 2
    share.drop("peer")
    assert (replacement.in_flight_requests, a.in_flight_requests) == (0, 2)  # the old object is no longer followed
