"""queue-scorer, kv-cache-utilization-scorer and lora-affinity-scorer: exact scores."""

from __future__ import annotations

import pytest
from scheduling_builders import request, state

from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.scheduling import CycleState, Scorer
from epp.plugins import kv_cache_scorer, lora_affinity_scorer, queue_scorer

CTX = PluginContext(seed=1)


def test_queue_scorer_min_max_normalised() -> None:
    scorer = queue_scorer.create("q", {}, CTX)
    assert isinstance(scorer, Scorer)
    states = [state(0, queue=0), state(1, queue=5), state(2, queue=10), state(3, queue=2)]
    assert scorer.score(CycleState(), request(), states) == [1.0, 0.5, 0.0, 0.8]


def test_queue_scorer_all_equal_scores_one() -> None:
    scorer = queue_scorer.QueueScorer()
    assert scorer.score(CycleState(), request(), [state(0, queue=7), state(1, queue=7)]) == [1.0, 1.0]
    assert scorer.score(CycleState(), request(), []) == []


def test_kv_cache_scorer_is_one_minus_usage() -> None:
    scorer = kv_cache_scorer.create("kv", {}, CTX)
    scores = scorer.score(CycleState(), request(), [state(0, kv=0.0), state(1, kv=0.25), state(2, kv=1.0)])
    assert scores == [1.0, 0.75, 0.0]
    assert scorer.typed_name.type == "kv-cache-utilization-scorer"
    assert scorer.typed_name.name == "kv"


def test_lora_affinity_scorer_levels() -> None:
    scorer = lora_affinity_scorer.create("lora", {}, CTX)
    states = [
        state(0, active={"ad"}, max_adapters=1),  # active → 1.0 even with no free slot
        state(1, active={"x"}, max_adapters=4),  # room: 1 + 0 < 4 → 0.8
        state(2, active={"x"}, waiting={"ad"}, max_adapters=2),  # no room (2), waiting → 0.6
        state(3, active={"x", "y"}, max_adapters=2),  # none → 0
        state(4, active={"x"}, waiting={"y"}, max_adapters=3),  # room counts waiting: 2 < 3 → 0.8
    ]
    assert scorer.score(CycleState(), request("ad"), states) == [1.0, 0.8, 0.6, 0.0, 0.8]


def test_parameterless_scorers_reject_parameters() -> None:
    with pytest.raises(PluginConfigError, match=r"queue-scorer\.parameters: unknown field\(s\) \['threshold'\]"):
        queue_scorer.create("q", {"threshold": 3}, CTX)
