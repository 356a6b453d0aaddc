"""Kubernetes JSON → datastore values: pods, pools (v1, v1alpha2), models, objectives, rewrites."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from kube_objects import model, objective, pod, pool_v1, pool_v1alpha2, rewrite, rule

from epp.datastore.types import ModelSpec, ObjectiveSpec, PodInfo, RewriteRule, TargetModel
from epp.kube.resources import V1_GROUP, V1ALPHA2_GROUP
from epp.kube.translate import (
    TranslationError,
    model_spec,
    objective_spec,
    pod_info,
    pool_spec,
    rewrite_spec,
    standalone_pool,
    standalone_pool_name,
)
from epp.labels import Requirement, Selector, parse_selector

JAN1 = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


# ------------------------------------------------------------------ pods


def test_ready_pod() -> None:
    obj = pod("p1", ip="10.1.2.3", labels={"app": "vllm", "x": "y"}, annotations={"a": "b"})
    assert pod_info(obj) == PodInfo(
        name="p1",
        namespace="default",
        ip="10.1.2.3",
        labels={"app": "vllm", "x": "y"},
        annotations={"a": "b"},
        ready=True,
        deleting=False,
    )


def test_not_ready_pod() -> None:
    assert pod_info(pod("p1", ready=False)).ready is False


def test_pod_without_ready_condition_is_not_ready() -> None:
    obj = pod("p1")
    obj["status"]["conditions"] = [{"type": "PodScheduled", "status": "True"}]
    assert pod_info(obj).ready is False
    del obj["status"]
    info = pod_info(obj)
    assert (info.ready, info.ip) == (False, "")


def test_deleting_pod_is_flagged_even_if_ready() -> None:
    info = pod_info(pod("p1", deleting=True))
    assert (info.ready, info.deleting) == (True, True)


def test_pod_without_ip() -> None:
    assert pod_info(pod("p1", ip=None)).ip == ""


def test_pod_label_values_are_strings() -> None:
    obj = pod("p1", labels={"n": 1})  # type: ignore[dict-item]
    assert pod_info(obj).labels == {"n": "1"}


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o["metadata"].pop("name"), "metadata.name"),
        (lambda o: o["metadata"].update(labels=["a"]), "metadata.labels"),
        (lambda o: o["status"].update(conditions={"type": "Ready"}), "status.conditions"),
    ],
)
def test_malformed_pod_names_the_field(mutate: object, message: str) -> None:
    obj = pod("p1")
    mutate(obj)  # type: ignore[operator]
    with pytest.raises(TranslationError, match=message):
        pod_info(obj)


# ------------------------------------------------------------------ pools


def test_pool_v1_match_labels_and_ports() -> None:
    spec = pool_spec(pool_v1("pool", match_labels={"app": "vllm"}, ports=(8000, 8001)), group=V1_GROUP)
    assert spec.name == "pool"
    assert spec.namespace == "default"
    assert spec.selector == Selector.from_match_labels({"app": "vllm"})
    assert spec.target_ports == (8000, 8001)
    assert spec.api_version == "inference.networking.k8s.io/v1"
    assert not spec.is_v1alpha2
    assert spec.app_protocol == "http"


def test_pool_v1_match_expressions() -> None:
    obj = pool_v1(
        match_labels={"app": "vllm"},
        match_expressions=[
            {"key": "tier", "operator": "In", "values": ["a", "b"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    )
    spec = pool_spec(obj, group=V1_GROUP)
    assert spec.selector.requirements == (
        Requirement("app", "=", frozenset({"vllm"})),
        Requirement("tier", "in", frozenset({"a", "b"})),
        Requirement("canary", "!"),
    )
    assert spec.selector.matches({"app": "vllm", "tier": "b"})
    assert not spec.selector.matches({"app": "vllm", "tier": "b", "canary": "1"})


def test_pool_v1_app_protocol() -> None:
    obj = pool_v1()
    obj["spec"]["appProtocol"] = "kubernetes.io/h2c"
    assert pool_spec(obj, group=V1_GROUP).app_protocol == "kubernetes.io/h2c"


def test_pool_v1alpha2() -> None:
    spec = pool_spec(pool_v1alpha2("p", selector={"app": "x", "b": "c"}, port=9000), group=V1ALPHA2_GROUP)
    assert spec.selector == parse_selector("app=x,b=c")
    assert spec.target_ports == (9000,)
    assert spec.is_v1alpha2
    assert spec.api_version == "inference.networking.x-k8s.io/v1alpha2"


@pytest.mark.parametrize(
    ("ports", "message"),
    [((), "need 1 to 8"), (tuple(range(8000, 8009)), "need 1 to 8"), ((8000, 8000), "duplicate"), ((0,), "outside")],
)
def test_pool_v1_bad_ports(ports: tuple[int, ...], message: str) -> None:
    with pytest.raises(TranslationError, match=message):
        pool_spec(pool_v1(ports=ports), group=V1_GROUP)


def test_pool_v1alpha2_missing_port() -> None:
    obj = pool_v1alpha2()
    del obj["spec"]["targetPortNumber"]
    with pytest.raises(TranslationError, match="targetPortNumber"):
        pool_spec(obj, group=V1ALPHA2_GROUP)


def test_pool_bad_selector_operator() -> None:
    obj = pool_v1(match_expressions=[{"key": "a", "operator": "Near"}])
    with pytest.raises(TranslationError, match="spec.selector"):
        pool_spec(obj, group=V1_GROUP)


# ------------------------------------------------------------------ objectives


def test_objective_for_our_pool() -> None:
    assert objective_spec(objective("critical", priority=10), pool_name="pool", pool_group=V1_GROUP) == ObjectiveSpec(
        name="critical", namespace="default", priority=10
    )


def test_objective_priority_unset_and_negative() -> None:
    assert objective_spec(objective("o"), pool_name="pool", pool_group=V1_GROUP) == ObjectiveSpec("o", "default")
    spec = objective_spec(objective("o", priority=-5), pool_name="pool", pool_group=V1_GROUP)
    assert spec is not None and spec.priority == -5


def test_objective_filtered_by_pool_name_and_group() -> None:
    assert objective_spec(objective("o", pool="other"), pool_name="pool", pool_group=V1_GROUP) is None
    # poolRef.group defaults to the v1 group.
    assert objective_spec(objective("o"), pool_name="pool", pool_group=V1ALPHA2_GROUP) is None
    alpha = objective("o", group=V1ALPHA2_GROUP)
    assert objective_spec(alpha, pool_name="pool", pool_group=V1ALPHA2_GROUP) is not None
    assert objective_spec(alpha, pool_name="pool", pool_group=V1_GROUP) is None


def test_deleting_objective_is_not_ours() -> None:
    obj = objective("o")
    obj["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert objective_spec(obj, pool_name="pool", pool_group=V1_GROUP) is None


def test_objective_bad_priority() -> None:
    obj = objective("o")
    obj["spec"]["priority"] = "high"
    with pytest.raises(TranslationError, match=r"InferenceObjective default/o spec.priority"):
        objective_spec(obj, pool_name="pool", pool_group=V1_GROUP)


# ------------------------------------------------------------------ rewrites


def test_rewrite_exact_and_generic_rules_with_weights() -> None:
    obj = rewrite(
        "rw",
        rules=[
            rule(["llama", "llama-chat"], [("llama-v2", 90), ("llama-v3", 10)]),
            rule([], [("fallback", None)]),
        ],
    )
    spec = rewrite_spec(obj, pool_name="pool", pool_group=V1_GROUP)
    assert spec is not None
    assert spec.created == JAN1
    assert spec.rules == (
        RewriteRule(
            matches=("llama", "llama-chat"),
            targets=(TargetModel("llama-v2", 90), TargetModel("llama-v3", 10)),
        ),
        RewriteRule(matches=(), targets=(TargetModel("fallback", None),)),
    )


def test_rewrite_match_type_defaults_to_exact() -> None:
    obj = rewrite("rw", rules=[{"matches": [{"model": {"value": "m"}}], "targets": [{"modelRewrite": "t"}]}])
    spec = rewrite_spec(obj, pool_name="pool", pool_group=V1_GROUP)
    assert spec is not None and spec.rules[0].matches == ("m",)


def test_rewrite_filtered_by_pool() -> None:
    obj = rewrite("rw", pool="other", rules=[])
    assert rewrite_spec(obj, pool_name="pool", pool_group=V1_GROUP) is None
    obj = rewrite("rw", group=V1ALPHA2_GROUP, rules=[])
    assert rewrite_spec(obj, pool_name="pool", pool_group=V1_GROUP) is None


@pytest.mark.parametrize(
    ("bad_rule", "message"),
    [
        ({"matches": [{"model": {"type": "Regex", "value": "m"}}]}, "unsupported match type"),
        ({"matches": [{"model": {"value": ""}}]}, r"matches\[0\].model.value"),
        ({"targets": [{"weight": 5}]}, r"targets\[0\].modelRewrite"),
        ({"targets": [{"modelRewrite": "t", "weight": 2_000_000}]}, r"targets\[0\].weight"),
    ],
)
def test_rewrite_bad_rules(bad_rule: dict[str, object], message: str) -> None:
    with pytest.raises(TranslationError, match=message):
        rewrite_spec(rewrite("rw", rules=[bad_rule]), pool_name="pool", pool_group=V1_GROUP)


# ------------------------------------------------------------------ models (v1alpha2)


def test_model() -> None:
    obj = model("m1", model_name="llama", criticality="Critical", targets=[("llama-a", 50), ("llama-b", 50)])
    assert model_spec(obj, pool_name="pool") == ModelSpec(
        name="m1",
        namespace="default",
        model_name="llama",
        criticality="Critical",
        target_models=(TargetModel("llama-a", 50), TargetModel("llama-b", 50)),
        created=JAN1,
    )


def test_model_filtered_by_pool_name_only() -> None:
    assert model_spec(model("m", model_name="x", pool="other"), pool_name="pool") is None
    obj = model("m", model_name="x")
    obj["spec"]["poolRef"]["group"] = "anything"
    assert model_spec(obj, pool_name="pool") is not None


def test_model_errors() -> None:
    with pytest.raises(TranslationError, match="criticality"):
        model_spec(model("m", model_name="x", criticality="Urgent"), pool_name="pool")
    with pytest.raises(TranslationError, match="modelName"):
        model_spec(model("m", model_name=""), pool_name="pool")
    with pytest.raises(TranslationError, match="creationTimestamp"):
        model_spec(model("m", model_name="x", created="yesterday"), pool_name="pool")


# ------------------------------------------------------------------ standalone


@pytest.mark.parametrize(
    ("pod_name", "pool_name"),
    [
        ("vllm-llama-7d9f8b6c5d-x2x4z", "vllm-llama"),
        ("epp-5f7b9c-abcde", "epp"),
        ("single", "standalone"),
        ("a-b", "standalone"),
        ("", "standalone"),
        (None, "standalone"),
    ],
)
def test_standalone_pool_name(pod_name: str | None, pool_name: str) -> None:
    assert standalone_pool_name(pod_name) == pool_name


def test_standalone_pool_from_flags() -> None:
    spec = standalone_pool(
        selector=parse_selector("app=vllm,tier=gpu"), target_ports=(8000, 8001), namespace="ns", pool_name="dep"
    )
    assert (spec.name, spec.namespace, spec.target_ports) == ("dep", "ns", (8000, 8001))
    assert spec.selector.matches({"app": "vllm", "tier": "gpu"})
    assert not spec.selector.matches({"app": "vllm"})
    assert not spec.is_v1alpha2


def test_standalone_pool_rejects_bad_flags() -> None:
    with pytest.raises(TranslationError, match="empty selector"):
        standalone_pool(selector=Selector(), target_ports=(8000,), namespace="ns", pool_name="p")
    with pytest.raises(TranslationError, match="duplicate"):
        standalone_pool(selector=parse_selector("a=b"), target_ports=(8000, 8000), namespace="ns", pool_name="p")
