"""Flow-control policies: FCFS and EDF keys, global-strict and round-robin picks, static ceilings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from epp.framework.plugin import PluginConfigError, PluginContext
from epp.plugins.flow_policies import (
    EdfOrdering,
    FcfsOrdering,
    GlobalStrictFairness,
    RoundRobinFairness,
    create_fcfs,
    create_static_usage_limit,
)


@dataclass
class Queued:
    seq: int
    enqueued_at: float
    ttl: float
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class FakeFlow:
    fairness_id: str
    key: tuple[float, ...]

    def head_key(self) -> tuple[float, ...]:
        return self.key


def order(policy: FcfsOrdering | EdfOrdering, items: list[Queued]) -> list[int]:
    return [i.seq for i in sorted(items, key=policy.key)]


def test_fcfs_is_arrival_order() -> None:
    items = [Queued(2, 5.0, 1.0), Queued(0, 1.0, 100.0), Queued(1, 3.0, 0.0)]
    assert order(FcfsOrdering(), items) == [0, 1, 2]


def test_edf_is_earliest_deadline_then_arrival_and_no_ttl_last() -> None:
    items = [
        Queued(0, 0.0, 0.0),  # no TTL: last
        Queued(1, 0.0, 10.0),  # deadline 10
        Queued(2, 5.0, 2.0),  # deadline 7
        Queued(3, 7.0, 0.0),  # no TTL, arrived later than 0
        Queued(4, 3.0, 4.0),  # deadline 7, arrived after 2: tie → earlier arrival first
    ]
    assert order(EdfOrdering(), items) == [2, 4, 1, 0, 3]


def test_global_strict_takes_the_best_head() -> None:
    flows = [FakeFlow("a", (5,)), FakeFlow("b", (2,)), FakeFlow("c", (9,))]
    assert GlobalStrictFairness().pick(flows, "b") is flows[1]
    assert GlobalStrictFairness().pick([], None) is None


def test_round_robin_takes_the_next_flow_after_the_last() -> None:
    flows = [FakeFlow("a", (5,)), FakeFlow("c", (2,)), FakeFlow("d", (9,))]
    rr = RoundRobinFairness()
    assert rr.pick(flows, None) is flows[0]
    assert rr.pick(flows, "a") is flows[1]
    assert rr.pick(flows, "b") is flows[1]  # b emptied and left: the next id after it
    assert rr.pick(flows, "d") is flows[0]  # wraps
    assert rr.pick([], "a") is None


def test_static_usage_limit_and_parameters() -> None:
    context = PluginContext()
    assert create_static_usage_limit("s", {}, context).ceilings(0.5, [3, 1]) == [1.0, 1.0]
    assert create_static_usage_limit("s", {"threshold": 0.7}, context).ceilings(0.5, [1]) == [0.7]
    with pytest.raises(PluginConfigError, match="threshold"):
        create_static_usage_limit("s", {"threshold": 0}, context)
    with pytest.raises(PluginConfigError, match="unknown"):
        create_fcfs("f", {"queue": 1}, context)
