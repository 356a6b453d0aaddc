"""legacy-filter-tree: the v0.3 decision tree, branch by branch, with seeded randomness."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scheduling_builders import names, request, state

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.scheduling import CycleState, Filter
from epp.plugins import legacy_filter_tree
from epp.plugins.legacy_filter_tree import LegacyFilterTree

CRITICAL = 1
STANDARD = 0


def run(
    tree: LegacyFilterTree, states: list[EndpointState], *, priority: int, model: str = "my-model-12345"
) -> list[str]:
    return names(tree.filter(CycleState(), request("my-model", target=model, priority=priority), states))


@pytest.fixture
def tree() -> LegacyFilterTree:
    return LegacyFilterTree(rng=random.Random(0))


def test_spec_worked_example_picks_p1(tree: LegacyFilterTree) -> None:
    # Hermetic case 1: queues 3, 0, 10; KV 0.2, 0.1, 0.2; critical; no adapters, no slots.
    states = [state(0, queue=3, kv=0.2), state(1, queue=0, kv=0.1), state(2, queue=10, kv=0.2)]
    assert isinstance(tree, Filter)
    assert run(tree, states, priority=CRITICAL) == ["pod-1"]


def test_least_queuing_keeps_the_low_range_before_kv(tree: LegacyFilterTree) -> None:
    # Range (10 - 0) // 3 = 3: queues 0..3 survive (p0, p1; p2 has the lowest KV but is out); equal KV keeps both.
    states = [state(0, queue=3, kv=0.3), state(1, queue=0, kv=0.3), state(2, queue=10, kv=0.0)]
    assert run(tree, states, priority=CRITICAL) == ["pod-0", "pod-1"]


def test_critical_with_affinity_prefers_the_loaded_adapter(tree: LegacyFilterTree) -> None:
    # p0 holds the adapter (and is busier); p1 has no free slot: only the affinity group exists.
    states = [
        state(0, queue=20, active={"my-model-12345"}, max_adapters=1),
        state(1, queue=0, active={"x"}, max_adapters=1),
    ]
    assert run(tree, states, priority=CRITICAL) == ["pod-0"]


def test_affinity_counts_waiting_adapters_as_loaded(tree: LegacyFilterTree) -> None:
    states = [
        state(0, queue=20, waiting={"my-model-12345"}, max_adapters=1),
        state(1, queue=0, active={"x"}, max_adapters=1),
    ]
    assert run(tree, states, priority=CRITICAL) == ["pod-0"]


def test_soft_affinity_probability() -> None:
    # Both groups non-empty: affinity with probability loraAffinityThreshold, else the free-slot group.
    states = [state(0, queue=0, active={"my-model-12345"}, max_adapters=2), state(1, queue=0, max_adapters=2)]
    always = legacy_filter_tree.create("t", {"loraAffinityThreshold": 1.0}, PluginContext(seed=1))
    never = legacy_filter_tree.create("t", {"loraAffinityThreshold": 0.0}, PluginContext(seed=1))
    assert run(always, states, priority=CRITICAL) == ["pod-0"]
    assert run(never, states, priority=CRITICAL) == ["pod-1"]
    half = legacy_filter_tree.create("t", {"loraAffinityThreshold": 0.5}, PluginContext(seed=1))
    counts = Counter(run(half, states, priority=CRITICAL)[0] for _ in range(2000))
    assert 900 < counts["pod-0"] < 1100, counts


def test_critical_without_affinity_or_slots_passes_input_on(tree: LegacyFilterTree) -> None:
    # LoRA finds neither group (no slots anywhere): its input goes on to leastQueuing.
    states = [state(0, queue=5, kv=0.1), state(1, queue=1, kv=0.5), state(2, queue=1, kv=0.4)]
    assert run(tree, states, priority=CRITICAL) == ["pod-2"]


def test_critical_all_queues_over_lora_threshold(tree: LegacyFilterTree) -> None:
    # No pod under 128: leastQueuing on all → [130, 130 + 170 // 3 = 186] → p0, p1; LoRA fails; least KV → p1.
    states = [state(0, queue=130, kv=0.5), state(1, queue=140, kv=0.1), state(2, queue=300, kv=0.0)]
    assert run(tree, states, priority=CRITICAL) == ["pod-1"]


def test_critical_low_queueing_drops_the_long_queues(tree: LegacyFilterTree) -> None:
    # lowQueueing keeps q < 128 (p0, p2); then leastQueuing over {127, 0}: 0 + 127 // 2 = 63 → p2.
    states = [state(0, queue=127), state(1, queue=128), state(2, queue=0, kv=0.9)]
    assert run(tree, states, priority=CRITICAL) == ["pod-2"]


def test_sheddable_with_capacity_uses_only_the_pods_with_room(tree: LegacyFilterTree) -> None:
    # hasCapacity: q <= 5 and kv <= 0.8, both inclusive → only p1 (p0 queue 6, p2 KV 0.81).
    states = [state(0, queue=6, kv=0.0), state(1, queue=5, kv=0.8), state(2, queue=1, kv=0.81)]
    assert run(tree, states, priority=STANDARD) == ["pod-1"]
    assert run(tree, states, priority=-1) == ["pod-1"]


def test_standard_requests_take_the_sheddable_path(tree: LegacyFilterTree) -> None:
    # v0.3: only Critical is protected; a Standard request ignores the q < 128 rule and is range-filtered.
    states = [state(0, queue=2, kv=0.5), state(1, queue=0, kv=0.5), state(2, queue=4, kv=0.1)]
    assert run(tree, states, priority=STANDARD) == ["pod-1"]  # range 4 // 3 = 1 → q 0..1 → p1


def test_sheddable_dropped_when_no_pod_has_capacity(tree: LegacyFilterTree) -> None:
    states = [state(0, queue=6), state(1, queue=0, kv=0.9)]
    assert run(tree, states, priority=STANDARD) == []
    assert run(tree, states, priority=CRITICAL) == ["pod-1"]  # critical work is not dropped


def test_zero_pods_fail_even_for_critical(tree: LegacyFilterTree) -> None:
    assert run(tree, [], priority=CRITICAL) == []
    assert run(tree, [], priority=STANDARD) == []


def test_thresholds_are_parameters() -> None:
    tree = legacy_filter_tree.create(
        "t", {"queueThresholdCritical": 10, "kvCacheThreshold": 0.95, "queueingThresholdLoRA": 3}, PluginContext(seed=0)
    )
    assert run(tree, [state(0, queue=8, kv=0.9)], priority=STANDARD) == ["pod-0"]
    # Critical: all q >= 3 → the failure branch still routes.
    assert run(tree, [state(0, queue=8), state(1, queue=4)], priority=CRITICAL) == ["pod-1"]
    with pytest.raises(PluginConfigError, match=r"loraAffinityThreshold: must be <= 1.0, got 2"):
        legacy_filter_tree.create("t", {"loraAffinityThreshold": 2}, PluginContext())
    with pytest.raises(PluginConfigError, match=r"unknown field\(s\) \['kvThreshold'\]"):
        legacy_filter_tree.create("t", {"kvThreshold": 0.5}, PluginContext())
