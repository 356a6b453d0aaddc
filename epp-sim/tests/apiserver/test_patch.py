"""Patch algorithms: JSON merge, JSON patch, strategic merge (kubectl's directives), apply field sets."""

from __future__ import annotations

import pytest

from epp_sim.apiserver.builtin_schemas import SCHEMAS
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.patch import apply_fields, json_patch, merge_patch, remove_stale, strategic_merge

POD = SCHEMAS["Pod"]


def test_merge_patch_merges_objects_and_deletes_with_null() -> None:
    assert merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None, "d": 3}, "l": [3]}) == {
        "a": {"c": 2, "d": 3},
        "l": [3],
    }


def test_json_patch_operations_and_failed_test() -> None:
    doc = {"a": [1, 2], "b": {"c": 1}}
    out = json_patch(doc, [
        {"op": "add", "path": "/a/-", "value": 3},
        {"op": "move", "from": "/b/c", "path": "/d"},
        {"op": "copy", "from": "/d", "path": "/b/e"},
        {"op": "replace", "path": "/a/0", "value": 0},
        {"op": "remove", "path": "/a/1"},
        {"op": "test", "path": "/d", "value": 1},
    ])  # fmt: skip
    assert out == {"a": [0, 3], "b": {"e": 1}, "d": 1} and doc == {"a": [1, 2], "b": {"c": 1}}
    with pytest.raises(ApiError) as info:
        json_patch(doc, [{"op": "test", "path": "/a/0", "value": 9}])
    assert info.value.code == 422


def test_strategic_merge_merges_lists_by_key_and_honours_directives() -> None:
    live = {"spec": {"containers": [
        {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]},
        {"name": "b", "image": "1"},
    ]}, "metadata": {"finalizers": ["f1"]}}  # fmt: skip
    patch = {
        "spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
            "containers": [
                {"name": "a", "env": [{"name": "Y", "$patch": "delete"}, {"name": "Z", "value": "3"}]},
                {"name": "c", "image": "2"},
            ],
        },
        "metadata": {"finalizers": ["f2"], "$deleteFromPrimitiveList/finalizers": ["f1"]},
    }
    out = strategic_merge(live, patch, POD)
    names = [c["name"] for c in out["spec"]["containers"]]
    assert names == ["b", "a", "c"]
    a = out["spec"]["containers"][1]
    assert a["image"] == "1" and a["env"] == [{"name": "X", "value": "1"}, {"name": "Z", "value": "3"}]
    assert out["metadata"]["finalizers"] == ["f2"]
    replaced = strategic_merge(live, {"spec": {"$patch": "replace", "containers": [{"name": "z"}]}}, POD)
    assert replaced["spec"] == {"containers": [{"name": "z"}]}
    conditions = strategic_merge(
        {"status": {"conditions": [{"type": "Ready", "status": "False"}]}},
        {"status": {"conditions": [{"type": "Ready", "status": "True"}]}},
        POD,
    )
    assert conditions["status"]["conditions"] == [{"type": "Ready", "status": "True"}]


def test_apply_fields_and_stale_removal_respect_other_owners() -> None:
    old = apply_fields({"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [
        {"name": "c", "image": "x", "args": ["1"]}]}}, POD)  # fmt: skip
    assert 'k:{"name":"c"}' in old["f:spec"]["f:containers"]
    new = apply_fields({"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}, POD)
    target = {"metadata": {"labels": {"a": "1", "b": "2"}}, "spec": {"containers": [
        {"name": "c", "image": "x", "args": ["1"]}]}}  # fmt: skip
    remove_stale(target, old, new, {})
    assert target == {"metadata": {"labels": {"a": "1"}}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
    kept = {"metadata": {"labels": {"a": "1", "b": "2"}}}
    remove_stale(kept, old, new, {"f:metadata": {"f:labels": {"f:b": {}}}})
    assert kept == {"metadata": {"labels": {"a": "1", "b": "2"}}}
