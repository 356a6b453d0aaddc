"""Where variants come from: annotated HPAs and ScaledObjects (upstream's rules), VAs, and which wins."""

from __future__ import annotations

from typing import Any

import pytest

from epp.autoscale.types import ModelKey, VariantKey
from epp.autoscale.variants import Source, VariantError, discover, parse_variant

ANNOTATIONS = {"llm-d.ai/managed": "true", "llm-d.ai/model-id": "meta/llama", "llm-d.ai/variant-cost": "30"}


def hpa(
    name: str, target: str, *, ns: str = "ns", annotations: dict[str, str] | None = None, **spec: Any
) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": f"uid-{name}",
            "annotations": ANNOTATIONS if annotations is None else annotations,
        },
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "maxReplicas": 8,
            **spec,
        },
    }


def scaled_object(name: str, target: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "annotations": ANNOTATIONS},
        "spec": {"scaleTargetRef": {"name": target}, "triggers": [], **spec},
    }


def va(name: str, target: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns"},
        "spec": {
            "scaleTargetRef": {"kind": "Deployment", "name": target},
            "modelID": "meta/llama",
            "variantCost": "20",
        },
    }


def test_an_annotated_hpa_is_a_variant_with_the_hpas_bounds() -> None:
    [v] = discover(
        hpas=[hpa("llama-a100", "llama", minReplicas=2)], scaled_objects=None, variant_autoscalings=None
    ).variants
    assert (v.key, v.source, v.model, v.cost) == (
        VariantKey("ns", "llama-a100"),
        Source.HPA,
        ModelKey("ns", "meta/llama"),
        30.0,
    )
    assert (v.target_kind, v.target, v.min_replicas, v.max_replicas, v.uid) == (
        "Deployment",
        "llama",
        2,
        8,
        "uid-llama-a100",
    )


def test_a_scaled_object_takes_kedas_defaults() -> None:
    [v] = discover(hpas=[], scaled_objects=[scaled_object("so", "llama")], variant_autoscalings=None).variants
    assert (v.source, v.min_replicas, v.max_replicas, v.target_kind) == (Source.SCALED_OBJECT, 0, 100, "Deployment")


def test_unmanaged_scalers_are_not_variants_and_cost_defaults_to_10() -> None:
    plain = hpa("plain", "x", annotations={})
    off = hpa("off", "y", annotations={**ANNOTATIONS, "llm-d.ai/managed": "false"})
    nocost = hpa("nocost", "z", annotations={"llm-d.ai/managed": "true", "llm-d.ai/model-id": "m"})
    found = discover(hpas=[plain, off, nocost], scaled_objects=None, variant_autoscalings=None)
    assert [(v.key.name, v.cost) for v in found.variants] == [("nocost", 10.0)]


def test_one_target_one_variant_scaled_object_over_hpa_over_va() -> None:
    # KEDA's own HPA inherits the ScaledObject's annotations: the ScaledObject is the variant
    keda_hpa = hpa("keda-hpa-so", "llama")
    found = discover(
        hpas=[keda_hpa], scaled_objects=[scaled_object("so", "llama")], variant_autoscalings=[va("old", "llama")]
    )
    assert [(v.key.name, v.source) for v in found.variants] == [("so", Source.SCALED_OBJECT)]
    found = discover(
        hpas=[hpa("new", "llama")], scaled_objects=None, variant_autoscalings=[va("old", "llama"), va("b", "other")]
    )
    assert [(v.key.name, v.source) for v in found.variants] == [("b", Source.VA), ("new", Source.HPA)]


def test_watch_namespace_controller_instance_and_deleting_objects() -> None:
    mine = hpa("mine", "a")
    mine["metadata"]["labels"] = {"wva.llmd.ai/controller-instance": "blue"}
    other = hpa("other", "b")
    gone = hpa("gone", "c")
    gone["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    elsewhere = hpa("elsewhere", "d", ns="team-b")
    found = discover(
        hpas=[mine, other, gone, elsewhere], scaled_objects=None, variant_autoscalings=None, controller_instance="blue"
    )
    assert [v.key.name for v in found.variants] == ["mine"]
    found = discover(
        hpas=[mine, other, gone, elsewhere], scaled_objects=None, variant_autoscalings=None, namespace="ns"
    )
    assert [v.key.name for v in found.variants] == ["mine", "other"]


@pytest.mark.parametrize(
    ("obj", "message"),
    [
        (hpa("a", "x", annotations={"llm-d.ai/managed": "true"}), "annotation llm-d.ai/model-id is required"),
        (
            hpa("a", "x", annotations={**ANNOTATIONS, "llm-d.ai/variant-cost": "cheap"}),
            "variant-cost='cheap': must be a number",
        ),
        (hpa("a", "x", annotations={**ANNOTATIONS, "llm-d.ai/variant-cost": "-1"}), "must be a non-negative number"),
        (hpa("a", "x", annotations={**ANNOTATIONS, "llm-d.ai/variant-cost": "nan"}), "must be a non-negative number"),
        (
            hpa(
                "a",
                "",
            ),
            "scaleTargetRef.name is required",
        ),
        (
            {**hpa("a", "x"), "spec": {"scaleTargetRef": {"kind": "StatefulSet", "name": "x"}, "maxReplicas": 2}},
            "only Deployment and LeaderWorkerSet",
        ),
        (hpa("a", "x", minReplicas=5, maxReplicas=2), "maximum replicas 2 is below the minimum 5"),
    ],
)
def test_invalid_annotations_are_reported_not_used(obj: dict[str, Any], message: str) -> None:
    found = discover(hpas=[obj], scaled_objects=None, variant_autoscalings=None)
    assert found.variants == ()
    [(source, key, _, error)] = found.invalid
    assert (source, key) == (Source.HPA, VariantKey("ns", "a"))
    assert message in error and "HorizontalPodAutoscaler ns/a" in error


def test_a_variant_autoscaling_keeps_its_status_and_bounds() -> None:
    obj = va("v", "lws-llama")
    obj["spec"]["scaleTargetRef"]["kind"] = "LeaderWorkerSet"
    obj["spec"].update(minReplicas=0, maxReplicas=3)
    obj["status"] = {"desiredOptimizedAlloc": {"numReplicas": 2, "accelerator": "H100"}}
    v = parse_variant(obj)
    assert (v.target_kind, v.min_replicas, v.max_replicas, v.previous_target, v.previous_accelerator) == (
        "LeaderWorkerSet", 0, 3, 2, "H100",
    )  # fmt: skip
    bad = va("v", "x")
    bad["spec"]["maxReplicas"] = 0
    with pytest.raises(VariantError, match="spec.maxReplicas=0"):
        parse_variant(bad)
