"""The YAML examples in docs/autoscaler.md load as the docs say: the HPA is a variant, the ConfigMaps parse."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from epp.autoscale.saturation_config import parse_saturation_configmap
from epp.autoscale.thresholds import ThresholdResolver
from epp.autoscale.types import ModelKey
from epp.autoscale.variants import discover

DOC = Path(__file__).parents[2] / "docs" / "autoscaler.md"


def _yaml_blocks() -> list[Any]:
    return [yaml.safe_load(b) for b in re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)]


def test_the_documented_hpa_declares_a_variant() -> None:
    hpa = next(b for b in _yaml_blocks() if b.get("kind") == "HorizontalPodAutoscaler")
    found = discover(hpas=[hpa], scaled_objects=None, variant_autoscalings=None)
    assert not found.invalid
    (v,) = found.variants
    assert (str(v.key), v.model_id, v.cost, v.min_replicas, v.max_replicas, v.target) == (
        "llm-production/llama-8b-a100",
        "meta-llama/Llama-3.1-8B-Instruct",
        30.0,
        1,
        8,
        "llama-8b-a100",
    )
    selector = hpa["spec"]["metrics"][0]["external"]["metric"]["selector"]["matchLabels"]
    assert selector == {"variant_name": "llama-8b-a100", "exported_namespace": "llm-production"}


def test_the_documented_configmaps_parse_as_described() -> None:
    blocks = _yaml_blocks()
    data = next(b["data"] for b in blocks if "data" in b)
    r = ThresholdResolver(saturation=parse_saturation_configmap(data))
    assert r.saturation(ModelKey("anywhere", "m")).v2  # analyzers present: V2
    llama = r.saturation(ModelKey("production", "meta/llama-70b"))
    assert (llama.priority, llama.thresholds("saturation")) == (2.0, (0.90, 0.70))
    assert r.saturation(ModelKey("team-a", "m")).queue_length_threshold == 10

    quota = next(b for b in blocks if "default" in b and "limiters" in b["default"])
    limited = parse_saturation_configmap(quota)
    assert limited.enable_limiter
    assert [q.name for q in limited.limiters] == ["cluster-h100", "per-team"]
