"""Objects of one kind from llm-d.ai and inference.networking.x-k8s.io, merged: llm-d.ai wins a shared name."""

from __future__ import annotations

import logging

import pytest

from epp.datastore.store import Datastore
from epp.datastore.types import ObjectiveSpec
from epp.kube.group_merge import GroupMerge, Sink
from epp.kube.resources import OPTIONAL_KINDS


def merged(store: Datastore, counts: list[int]) -> GroupMerge[ObjectiveSpec]:
    return GroupMerge(
        OPTIONAL_KINDS["InferenceObjective"],
        Sink(store.set_objective, store.remove_objective),
        on_shadowed=counts.append,
    )


def priority(store: Datastore, name: str) -> int | None:
    objective = store.objective(name)
    return None if objective is None else objective.priority


def test_both_groups_feed_the_store_and_llm_d_wins_a_shared_name(caplog: pytest.LogCaptureFixture) -> None:
    store, counts = Datastore(), []
    merge = merged(store, counts)
    merge.legacy.store(ObjectiveSpec("only-legacy", "default", 1))
    merge.winning.store(ObjectiveSpec("only-new", "default", 2))
    merge.legacy.store(ObjectiveSpec("both", "default", -1))
    assert priority(store, "both") == -1  # alone so far: the legacy object counts
    with caplog.at_level(logging.WARNING, logger="epp.kube.group_merge"):
        merge.winning.store(ObjectiveSpec("both", "default", 10))
        merge.legacy.store(ObjectiveSpec("both", "default", -5))  # an update of the shadowed one changes nothing
        assert priority(store, "both") == 10
        merge.winning.store(ObjectiveSpec("both", "default", 11))
    assert (priority(store, "only-legacy"), priority(store, "only-new"), priority(store, "both")) == (1, 2, 11)
    assert merge.shadowed == {("default", "both")}
    assert counts[-1] == 1
    assert [r.getMessage() for r in caplog.records] == ["object exists in both API groups; the legacy one is ignored"]
    assert caplog.records[0].object == "default/both"  # type: ignore[attr-defined]


def test_the_shadowed_object_returns_when_the_winner_goes_and_yields_when_it_comes_back() -> None:
    store, counts = Datastore(), []
    merge = merged(store, counts)
    merge.legacy.store(ObjectiveSpec("o", "default", -1))
    merge.winning.store(ObjectiveSpec("o", "default", 10))
    merge.winning.remove("default", "o")
    assert priority(store, "o") == -1 and counts[-1] == 0
    merge.winning.store(ObjectiveSpec("o", "default", 10))
    assert priority(store, "o") == 10 and counts[-1] == 1
    merge.legacy.remove("default", "o")  # the hidden one goes: the winner stays
    assert priority(store, "o") == 10 and counts[-1] == 0
    merge.winning.remove("default", "o")
    assert store.objective("o") is None


def test_same_name_in_two_namespaces_is_no_conflict() -> None:
    store, counts = Datastore(), []
    merge = merged(store, counts)
    merge.legacy.store(ObjectiveSpec("o", "team-a", 1))
    merge.winning.store(ObjectiveSpec("o", "team-b", 2))
    assert merge.shadowed == set() and counts == []
