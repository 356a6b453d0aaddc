"""max-score, random and weighted-random pickers with seeded randomness."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from scheduling_builders import names, request, state

from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.scheduling import CycleState, Picker, ScoredEndpoint
from epp.plugins import pickers


def scored(*scores: float) -> list[ScoredEndpoint]:
    return [ScoredEndpoint(state(i), s) for i, s in enumerate(scores)]


def test_max_score_picks_the_highest() -> None:
    picker = pickers.create_max_score("p", {}, PluginContext(seed=3))
    assert isinstance(picker, Picker)
    result = picker.pick(CycleState(), request(), scored(0.2, 3.5, 1.0))
    assert names(result.targets) == ["pod-1"]


def test_max_score_tie_break_is_uniform_with_seed() -> None:
    picker = pickers.MaxScorePicker(rng=random.Random(42))
    candidates = scored(2.0, 5.0, 5.0, 5.0, 1.0)
    counts = Counter(picker.pick(CycleState(), request(), candidates).targets[0].endpoint.pod_name for _ in range(3000))
    assert set(counts) == {"pod-1", "pod-2", "pod-3"}
    for pod in ("pod-1", "pod-2", "pod-3"):
        assert 900 < counts[pod] < 1100, counts


def test_max_score_several_endpoints_sorted_desc_with_random_ties() -> None:
    picker = pickers.create_max_score("p", {"maxNumOfEndpoints": 3}, PluginContext(seed=7))
    candidates = scored(0.1, 0.9, 0.5, 0.9, 0.3)
    seen_first = set()
    for _ in range(200):
        result = names(picker.pick(CycleState(), request(), candidates).targets)
        assert sorted(result[:2]) == ["pod-1", "pod-3"]
        assert result[2] == "pod-2"
        seen_first.add(result[0])
    assert seen_first == {"pod-1", "pod-3"}


def test_max_score_fewer_candidates_than_requested() -> None:
    picker = pickers.MaxScorePicker(max_num_of_endpoints=5, rng=random.Random(0))
    assert names(picker.pick(CycleState(), request(), scored(1.0, 2.0)).targets) == ["pod-1", "pod-0"]
    assert picker.pick(CycleState(), request(), []).targets == []


def test_random_picker_ignores_scores() -> None:
    picker = pickers.create_random("r", {}, PluginContext(seed=5))
    counts = Counter(names(picker.pick(CycleState(), request(), scored(0.0, 10.0)).targets)[0] for _ in range(2000))
    assert 900 < counts["pod-0"] < 1100, counts
    multi = pickers.RandomPicker(max_num_of_endpoints=2, rng=random.Random(1))
    picked = names(multi.pick(CycleState(), request(), scored(1, 1, 1)).targets)
    assert len(picked) == 2 and len(set(picked)) == 2


def test_weighted_random_follows_scores() -> None:
    picker = pickers.create_weighted_random("w", {}, PluginContext(seed=11))
    counts = Counter(names(picker.pick(CycleState(), request(), scored(1.0, 3.0, 0.0)).targets)[0] for _ in range(4000))
    assert counts["pod-2"] == 0  # score 0: never picked while a positive score exists
    assert 0.70 < counts["pod-1"] / 4000 < 0.80, counts  # 3 / (1 + 3)


def test_weighted_random_all_zero_falls_back_to_uniform() -> None:
    picker = pickers.WeightedRandomPicker(rng=random.Random(2))
    counts = Counter(names(picker.pick(CycleState(), request(), scored(0.0, 0.0)).targets)[0] for _ in range(2000))
    assert 900 < counts["pod-0"] < 1100, counts


def test_weighted_random_fills_with_zero_scores_last() -> None:
    picker = pickers.WeightedRandomPicker(max_num_of_endpoints=3, rng=random.Random(4))
    result = names(picker.pick(CycleState(), request(), scored(0.0, 1.0, 2.0)).targets)
    assert sorted(result[:2]) == ["pod-1", "pod-2"] and result[2] == "pod-0"


def test_same_seed_same_choices() -> None:
    a = pickers.create_max_score("a", {}, PluginContext(seed=9))
    b = pickers.create_max_score("b", {}, PluginContext(seed=9))
    candidates = scored(1, 1, 1, 1)
    assert [names(a.pick(CycleState(), request(), candidates).targets) for _ in range(20)] == [
        names(b.pick(CycleState(), request(), candidates).targets) for _ in range(20)
    ]


@pytest.mark.parametrize("value", [0, -1, "2", 1.5, True])
def test_max_num_of_endpoints_validated(value: object) -> None:
    with pytest.raises(PluginConfigError, match=r"max-score-picker\.parameters\.maxNumOfEndpoints"):
        pickers.create_max_score("p", {"maxNumOfEndpoints": value}, PluginContext())
