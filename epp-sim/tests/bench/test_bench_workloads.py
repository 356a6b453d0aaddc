"""Seeded workloads: same seed → same arrivals; the shapes the routing benchmark relies on; fairness scoring."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from epp.framework.headers import FAIRNESS_ID, OBJECTIVE
from epp_sim.bench.routing.scoring import jain_index, max_min_shares
from epp_sim.bench.workloads import (
    ADAPTERS,
    BASE_MODEL,
    CRITICAL_OBJECTIVE,
    SHEDDABLE_OBJECTIVE,
    WORKLOADS,
    bursty,
    capacity,
    chat_mix,
    overload,
    shared_prefix,
    slo_mix,
)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
def test_same_seed_same_arrivals_and_another_seed_differs(name: str) -> None:
    generate = WORKLOADS[name].generate
    a, b, c = generate(20.0, 10.0, 7), generate(20.0, 10.0, 7), generate(20.0, 10.0, 8)
    assert [(x.at, x.data) for x in a] == [(x.at, x.data) for x in b]
    assert [(x.at, x.data) for x in a] != [(x.at, x.data) for x in c]
    assert all(x.at <= y.at for x, y in zip(a, a[1:], strict=False))
    assert all(0 <= x.at < 10.0 for x in a)
    assert all(json.loads(x.data) == x.body for x in a)


def test_shared_prefix_rate_groups_and_prefixes() -> None:
    arrivals = shared_prefix(40.0, 50.0, 3, groups=6, system_tokens=200, question_tokens=20)
    assert 1700 < len(arrivals) < 2300  # Poisson: 2,000 expected
    by_group: dict[str, set[str]] = {}
    for a in arrivals:
        messages = a.body["messages"]
        assert isinstance(messages, list)
        by_group.setdefault(a.group, set()).add(messages[0]["content"])
        assert a.body["stream"] is True and a.model == BASE_MODEL
        assert 16 <= a.max_tokens <= 48
    assert len(by_group) == 6
    assert all(len(systems) == 1 for systems in by_group.values())  # one system prompt per tenant
    assert len({next(iter(s)) for s in by_group.values()}) == 6
    assert all(200 <= a.prompt_tokens <= 240 for a in arrivals)


def test_chat_mix_sessions_grow_and_mix_adapters_and_sheddable() -> None:
    arrivals = chat_mix(30.0, 60.0, 5)
    sessions: dict[str, list[list[dict[str, str]]]] = {}
    for a in arrivals:
        sessions.setdefault(a.group, []).append(a.body["messages"])  # type: ignore[arg-type]
    multi = [turns for turns in sessions.values() if len(turns) > 1]
    assert multi
    for turns in multi:
        for earlier, later in zip(turns, turns[1:], strict=False):
            assert later[: len(earlier)] == earlier  # each turn resends the conversation so far
    models = [a.model for a in arrivals]
    assert BASE_MODEL in models and set(models) - {BASE_MODEL} <= set(ADAPTERS)
    assert 0.3 < sum(m != BASE_MODEL for m in models) / len(models) < 0.7
    shed = [a for a in arrivals if a.sheddable]
    assert 0.05 < len(shed) / len(arrivals) < 0.4
    assert all(a.headers == {OBJECTIVE: SHEDDABLE_OBJECTIVE} for a in shed)
    assert 20.0 < len(arrivals) / 60.0 < 40.0


def test_capacity_is_servers_over_mean_uncached_cost() -> None:
    arrivals = shared_prefix(10.0, 20.0, 1, groups=2, system_tokens=1000, question_tokens=0, output_tokens=(10, 10))
    tokens = arrivals[0].prompt_tokens
    assert all(a.prompt_tokens == tokens for a in arrivals)
    expected = 4 / (tokens * 0.001 + 10 * 0.01)
    assert capacity(arrivals, servers=4, prefill_time_per_token=0.001, decode_time_per_seq=0.01) == pytest.approx(
        expected
    )
    assert capacity([], servers=4, prefill_time_per_token=0.001, decode_time_per_seq=0.01) == 0.0


def test_overload_tenants_and_classes() -> None:
    arrivals = overload(200.0, 20.0, 1)
    tenants = Counter(a.tenant for a in arrivals)
    classes = Counter(a.service_class for a in arrivals)
    assert set(tenants) == {"tenant-0", "tenant-1", "tenant-2", "tenant-3"}
    assert 0.65 < tenants["tenant-0"] / len(arrivals) < 0.75
    assert set(classes) == {"critical", "sheddable"} and 0.35 < classes["critical"] / len(arrivals) < 0.45
    assert all(a.headers[FAIRNESS_ID] == a.tenant for a in arrivals)
    assert {a.headers[OBJECTIVE] for a in arrivals} == {CRITICAL_OBJECTIVE, SHEDDABLE_OBJECTIVE}
    assert len({a.data for a in arrivals}) == len(arrivals)  # unique prompts: nothing is cached


def test_max_min_shares_and_jain_index() -> None:
    offered = {"big": 70.0, "a": 10.0, "b": 10.0, "c": 10.0}
    assert max_min_shares(offered, 40.0) == {"big": 10.0, "a": 10.0, "b": 10.0, "c": 10.0}
    assert max_min_shares(offered, 60.0) == {"big": 30.0, "a": 10.0, "b": 10.0, "c": 10.0}
    assert max_min_shares({"a": 5.0, "b": 50.0}, 30.0) == {"a": 5.0, "b": 25.0}
    assert jain_index({"big": 30, "a": 10, "b": 10, "c": 10}, offered) == pytest.approx(1.0)
    assert jain_index({"big": 54, "a": 2, "b": 2, "c": 2}, offered) == pytest.approx(
        0.25 * (3 * 0.2 + 1.8) ** 2 / (3 * 0.04 + 3.24)
    )
    assert jain_index({"a": 0, "b": 0}, {"a": 1, "b": 1}) is None


def test_bursty_comes_in_bursts_of_unique_prompts() -> None:
    arrivals = bursty(40.0, 50.0, 3, burst=(4, 12), spread=0.02, prompt_tokens=(100, 300))
    assert 1500 < len(arrivals) < 2500  # 2,000 expected, in bursts of 8 on average
    bursts = [[arrivals[0]]]
    for a in arrivals[1:]:
        if a.at - bursts[-1][0].at <= 0.02:
            bursts[-1].append(a)
        else:
            bursts.append([a])
    sizes = [len(b) for b in bursts]
    assert sum(size <= 12 for size in sizes) / len(sizes) > 0.8  # ~10% of bursts overlap the next
    assert 7 < len(arrivals) / len(bursts) < 9.5
    firsts = [json.loads(a.data)["messages"][0]["content"][:16] for a in arrivals]
    assert len(set(firsts)) == len(arrivals)  # unique from the first block: no prefix to share
    assert all(100 <= a.prompt_tokens <= 310 and 16 <= a.max_tokens <= 48 for a in arrivals)


def test_slo_mix_two_classes_objectives_only_on_the_interactive_one() -> None:
    arrivals = slo_mix(20.0, 50.0, 4)
    interactive = [a for a in arrivals if a.service_class == "critical"]
    batch = [a for a in arrivals if a.service_class == "sheddable"]
    assert len(interactive) + len(batch) == len(arrivals) and 0.4 < len(interactive) / len(arrivals) < 0.6
    assert all(a.slo_ms == (250.0, 50.0) and a.headers[OBJECTIVE] == CRITICAL_OBJECTIVE for a in interactive)
    assert all(a.slo_ms == (0.0, 0.0) and a.headers[OBJECTIVE] == SHEDDABLE_OBJECTIVE for a in batch)
    assert all(100 <= a.prompt_tokens <= 410 and 16 <= a.max_tokens <= 64 for a in interactive)
    assert all(1000 <= a.prompt_tokens <= 2510 and 32 <= a.max_tokens <= 128 for a in batch)
