"""The conformance suite's request hook: ``test-epp-endpoint-selection`` parsing, round-robin, the pool pipeline."""

from __future__ import annotations

from collections import Counter

import pytest
from pool_harness import Harness

from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.labels import Selector
from epp.requestcontrol.conformance import RoundRobin, selected_endpoints
from epp.requestcontrol.pool_routing import RoutingOptions

SELECTION = "test-epp-endpoint-selection"


def store_of(*ips: str, ports: tuple[int, ...] = (8000,)) -> Datastore:
    store = Datastore()
    pool = PoolSpec(
        name="pool", namespace="default", selector=Selector.from_match_labels({"a": "b"}), target_ports=ports
    )
    pods = [
        PodInfo(name=f"pod-{i}", namespace="default", ip=ip, labels={"a": "b"}, ready=True) for i, ip in enumerate(ips)
    ]
    store.set_pool(pool, pods)
    return store


def two_port_store() -> Datastore:
    """Pods 10.0.0.1 and fd00::2, each serving ports 8000 and 8001 (two endpoints per pod)."""
    return store_of("10.0.0.1", "fd00::2", ports=(8000, 8001))


def pool(store: Datastore, *, hooks: bool) -> Harness:
    """The default profile over ``store`` (metrics never scraped: every pod scores the same)."""
    return Harness(store, options=RoutingOptions(conformance_hooks=hooks))


FOUR = ("10.0.0.0", "10.0.0.1", "10.0.0.2", "10.0.0.3")


def hostports(states: list[EndpointState]) -> list[str]:
    return [s.endpoint.hostport for s in states]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("10.0.0.1", ["10.0.0.1:8000", "10.0.0.1:8001"]),  # an IP names every port of the pod
        ("10.0.0.1:8001", ["10.0.0.1:8001"]),
        (" 10.0.0.1:8001 , [fd00::2]:8000 ", ["10.0.0.1:8001", "[fd00::2]:8000"]),
        ("fd00::2", ["[fd00::2]:8000", "[fd00::2]:8001"]),
        ("[fd00::2]", ["[fd00::2]:8000", "[fd00::2]:8001"]),
        ("fd00::2,10.0.0.1:9999,,10.9.9.9", ["[fd00::2]:8000", "[fd00::2]:8001"]),
        ("10.0.0.1:http,10.0.0.9", []),  # a port that is not a number names nothing
    ],
)
def test_selected_endpoints(value: str, expected: list[str]) -> None:
    assert hostports(selected_endpoints(value, two_port_store().endpoints())) == expected


def test_round_robin_takes_each_in_turn() -> None:
    states = list(two_port_store().endpoints())
    rr = RoundRobin()
    assert [rr.pick(states).endpoint.hostport for _ in range(5)] == hostports(states + states[:1])
    assert rr.pick(states[:1]) is states[0]


def _request(**headers: str) -> InferenceRequest:
    return InferenceRequest(request_id="r", model="m", headers=headers)


async def test_the_header_names_the_candidates_round_robin_over_the_subset_hint() -> None:
    d = pool(store_of(*FOUR), hooks=True)
    selection = _request(**{SELECTION: "10.0.0.1,10.0.0.3"})
    picks = Counter([(await d.decide(selection, frozenset({"10.0.0.2"}))).destination for _ in range(10)])
    assert picks == {"10.0.0.1:8000": 5, "10.0.0.3:8000": 5}
    assert d.headers_only(_request(**{SELECTION: "10.0.0.2:8000"})).destination == "10.0.0.2:8000"
    # Without the header the request is scheduled as usual (here: the subset hint applies).
    assert (await d.decide(_request(), frozenset({"10.0.0.2"}))).destination == "10.0.0.2:8000"


async def test_a_header_naming_no_endpoint_is_503() -> None:
    d = pool(store_of(*FOUR), hooks=True)
    for headers_only in (False, True):
        with pytest.raises(EppError) as err:
            request = _request(**{SELECTION: "10.9.9.9"})
            if headers_only:
                d.headers_only(request)
            else:
                await d.decide(request)
        assert err.value.code is ErrorCode.SERVICE_UNAVAILABLE
        assert err.value.msg == "failed to find endpoint candidates for serving the request"


async def test_without_the_flag_the_header_is_an_ordinary_header() -> None:
    d = pool(store_of(*FOUR), hooks=False)
    seen = {(await d.decide(_request(**{SELECTION: "10.0.0.1"}))).destination for _ in range(20)}
    assert len(seen) > 1  # the default profile spreads equal pods
    assert (await d.decide(_request(**{SELECTION: "10.9.9.9"}))).targets
