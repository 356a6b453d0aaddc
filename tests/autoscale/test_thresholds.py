"""The saturation and scale-to-zero ConfigMaps: upstream v0.9's shipped map loads unchanged, every
documented form resolves, and every invalid entry is rejected naming the key, field and value."""

from __future__ import annotations

import pytest

from epp.autoscale.quota import QuotaLimiter
from epp.autoscale.saturation_config import AnalyzerSpec, ConfigError, SaturationConfig, parse_saturation_configmap
from epp.autoscale.thresholds import ThresholdResolver, parse_scale_to_zero_configmap
from epp.autoscale.types import ModelKey
from epp.framework.saturation import Thresholds

# Upstream WVA's shipped saturation ConfigMap (deploy/configmap-saturation-scaling.yaml and
# config/base/manager/saturation-scaling-configmap.yaml at llm-d-workload-variant-autoscaler
# 2976e4ee, v0.9): its keys and values, comments left out.
UPSTREAM_V09_DEFAULT = """\
analyzers:
  - name: saturation
    score: 1.0
scaleUpThreshold: 0.85
scaleDownBoundary: 0.70
kvCacheThreshold: 0.80
queueLengthThreshold: 5
kvSpareTrigger: 0.1
queueSpareTrigger: 3
enableLimiter: false
enableRescale: false
"""
# The forms its comments document: a "{modelID}#{namespace}" override with the plugin envelope,
# priority and inline scale-to-zero; a plain one; and the quota limiter on the default entry.
UPSTREAM_OVERRIDES = {
    "meta/llama-70b#production": """\
model_id: meta/llama-70b
namespace: production
priority: 2.0
scaleToZero: { enabled: false }
analyzers:
  - type: saturation
    parameters: { scaleUpThreshold: 0.90 }
""",
    "ibm/granite-13b#lab-namespace": """\
model_id: ibm/granite-13b
namespace: lab-namespace
kvCacheThreshold: 0.75
queueLengthThreshold: 10
""",
}
UPSTREAM_QUOTA = """\
limiters:
  - type: quota
    name: cluster-h100
    scope: cluster
    quotas: { H100: 32 }
"""


def test_upstream_v09_shipped_configmap_loads_and_selects_v2() -> None:
    r = ThresholdResolver(saturation=parse_saturation_configmap({"default": UPSTREAM_V09_DEFAULT}))
    cfg = r.saturation(ModelKey("any", "model"))
    assert cfg == SaturationConfig()  # the shipped defaults are upstream's shipped map
    assert cfg.v2 and cfg.analyzers == (AnalyzerSpec("saturation"),)
    assert (cfg.scale_up_threshold, cfg.scale_down_boundary) == (0.85, 0.70)
    assert r.limiters == ()


def test_upstream_documented_forms_resolve() -> None:
    data = {"default": UPSTREAM_V09_DEFAULT.replace("enableLimiter: false", "enableLimiter: true") + UPSTREAM_QUOTA}
    r = ThresholdResolver(saturation=parse_saturation_configmap({**data, **UPSTREAM_OVERRIDES}))
    llama = r.saturation(ModelKey("production", "meta/llama-70b"))
    assert llama.priority == 2.0 and llama.scale_to_zero is False
    assert llama.thresholds("saturation") == (0.90, 0.70)  # the envelope's parameter folds into the analyzer
    granite = r.saturation(ModelKey("lab-namespace", "ibm/granite-13b"))
    assert (granite.kv_cache_threshold, granite.queue_length_threshold, granite.v2) == (0.75, 10.0, True)
    assert r.saturation(ModelKey("production", "ibm/granite-13b")).kv_cache_threshold == 0.80  # other namespace
    assert r.limiters == (QuotaLimiter("cluster-h100", "cluster", quotas={"H100": 32}),)
    assert not r.scale_to_zero(ModelKey("production", "meta/llama-70b")).enabled


def test_removing_analyzers_opts_out_to_v1_and_analyzer_name_opts_in() -> None:
    v1 = parse_saturation_configmap({"default": "kvCacheThreshold: 0.8\nkvSpareTrigger: 0.1"})
    assert not ThresholdResolver(saturation=v1).saturation(ModelKey("a", "b")).v2
    named = parse_saturation_configmap({"default": "analyzerName: saturation"})
    assert ThresholdResolver(saturation=named).saturation(ModelKey("a", "b")).v2
    # no ConfigMap at all: the shipped defaults, V2
    assert ThresholdResolver().saturation(ModelKey("a", "b")).v2


def test_throughput_analyzer_and_per_analyzer_thresholds() -> None:
    data = {
        "default": (
            "analyzers:\n  - name: saturation\n    scaleUpThreshold: 0.9\n"
            "  - type: throughput\n    score: 2\n    enabled: true\n"
        )
    }
    cfg = ThresholdResolver(saturation=parse_saturation_configmap(data)).saturation(ModelKey("a", "b"))
    assert [a.name for a in cfg.analyzers] == ["saturation", "throughput"]
    assert cfg.thresholds("saturation") == (0.9, 0.70) and cfg.thresholds("throughput") == (0.85, 0.70)
    assert cfg.analyzer("throughput") == AnalyzerSpec("throughput", score=2.0)


def test_namespace_wide_and_model_overrides_layer_on_the_default() -> None:
    data = {
        "default": "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\nkvSpareTrigger: 0.1\nqueueSpareTrigger: 3\n",
        "granite-13b-production": "model_id: ibm/granite-13b\nnamespace: production\nkvCacheThreshold: 0.85\n",
        "staging-wide": "namespace: staging\nqueueLengthThreshold: 10\n",
        "llama#staging": "queueSpareTrigger: 6\n",
    }
    r = ThresholdResolver(saturation=parse_saturation_configmap(data))
    assert r.saturation(ModelKey("production", "ibm/granite-13b")).kv_cache_threshold == 0.85
    assert r.saturation(ModelKey("other", "ibm/granite-13b")).kv_cache_threshold == 0.80
    staging = r.saturation(ModelKey("staging", "llama"))
    assert (staging.queue_length_threshold, staging.queue_spare_trigger) == (10.0, 6.0)
    assert r.saturation(ModelKey("staging", "mistral")).queue_spare_trigger == 3.0


def test_namespace_local_configmap_replaces_global() -> None:
    global_map = parse_saturation_configmap({"default": "kvCacheThreshold: 0.7\nkvSpareTrigger: 0.2"})
    local = parse_saturation_configmap({"default": "queueLengthThreshold: 8"}, local=True)
    r = ThresholdResolver(saturation=global_map, saturation_local={"team-a": local})
    a, b = r.saturation(ModelKey("team-a", "m")), r.saturation(ModelKey("team-b", "m"))
    assert (a.kv_cache_threshold, a.queue_length_threshold) == (0.8, 8)  # not merged with global
    assert (b.kv_cache_threshold, b.kv_spare_trigger) == (0.7, 0.2)


def test_local_map_without_default_inherits_global_default() -> None:
    global_map = parse_saturation_configmap({"default": "queueSpareTrigger: 1"})
    local = parse_saturation_configmap({"m#team-a": "kvSpareTrigger: 0.3"}, local=True)
    cfg = ThresholdResolver(saturation=global_map, saturation_local={"team-a": local}).saturation(
        ModelKey("team-a", "m")
    )
    assert (cfg.queue_spare_trigger, cfg.kv_spare_trigger, cfg.v2) == (1, 0.3, False)


def test_shared_saturation_notion_with_picker_thresholds() -> None:
    cfg = SaturationConfig.from_thresholds(Thresholds(queue_depth=7, kv_cache_util=0.9))
    assert (cfg.queue_length_threshold, cfg.kv_cache_threshold, cfg.kv_spare_trigger) == (7.0, 0.9, 0.1)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"default": "kvCacheThreshold: 1.5"}, "key 'default': kvCacheThreshold must be in [0, 1], got 1.5"),
        ({"default": "queueLengthThreshold: -1"}, "queueLengthThreshold must be >= 0, got -1"),
        ({"default": "kvSpareTrigger: -0.1"}, "kvSpareTrigger must be in [0, 1]"),
        ({"default": "queueSpareTrigger: -2"}, "queueSpareTrigger must be >= 0"),
        (
            {"default": "kvCacheThreshold: 0.2\nkvSpareTrigger: 0.3"},
            "kvCacheThreshold (0.2) must be >= kvSpareTrigger (0.3)",
        ),
        ({"default": "scaleUpThreshold: 0.6"}, "scaleUpThreshold (0.6) must be > scaleDownBoundary (0.7)"),
        ({"default": "scaleDownBoundary: 0"}, "scaleDownBoundary must be in (0, 1], got 0"),
        ({"default": "priority: -1"}, "priority must be >= 0"),
        ({"default": "kvCacheThresold: 0.8"}, "kvCacheThresold=0.8: Extra inputs are not permitted"),
        ({"default": "kvCacheThreshold: lots"}, "kvCacheThreshold='lots'"),
        ({"default": "[1, 2]"}, "expected a mapping of fields, got list"),
        ({"default": "a: [b"}, "not valid YAML"),
        ({"default": "analyzers: [{name: queueing-model}]"}, "analyzer 'queueing-model' is not supported"),
        ({"default": "analyzers: [{name: saturaton}]"}, "unknown analyzer type 'saturaton'"),
        ({"default": "analyzers: [{type: saturation, parameters: {score: high}}]"}, "parameter score='high'"),
        ({"default": "analyzers: [{type: saturation, parameters: {speed: 1}}]"}, "unknown parameter(s) speed"),
        (
            {"default": "analyzers: [{type: saturation, scaleUpThreshold: 1.5}]"},
            "analyzer 'saturation': scaleUpThreshold",
        ),
        ({"default": "analyzerName: queueing"}, "analyzerName='queueing'"),
        ({"default": "enableRescale: true"}, "priority-weighted rescaling is not supported"),
        ({"default": "enableLimiter: true"}, "GPU-inventory limiter (upstream's default) is not supported"),
        ({"default": "limiters: [{type: gpu-inventory}]"}, "needs GPU discovery from Nodes"),
        ({"x#ns": "enableLimiter: true"}, "enableLimiter is honoured only on the global ConfigMap's default entry"),
        (
            {"default": "enableLimiter: true\nlimiters: [{type: quota, name: q, scope: cluster, quotas: {H100: -2}}]"},
            "quotas['H100']=-2: must be >= -1",
        ),
        (
            {"default": "limiters: [{type: quota, name: q, scope: team}, {type: quota, name: q, scope: cluster}]"},
            "scope must be 'cluster' or 'namespace', got 'team'; limiters[1]: duplicate limiter name 'q'",
        ),
        (
            {"default": "limiters: [{type: quota, name: q, scope: cluster, namespaceQuotas: {a: {H100: 1}}}]"},
            "namespaceQuotas is invalid for cluster scope",
        ),
        (
            {"x": "kvCacheThreshold: 0.9"},
            "key 'x': an override entry needs a '{modelID}#{namespace}' key or a namespace",
        ),
        ({"m#ns": "model_id: other"}, "model_id='other' disagrees with the key ('m')"),
        ({"default": "namespace: a"}, "default entry must not set model_id or namespace"),
        # a partial override is validated merged onto the default
        (
            {"default": "kvCacheThreshold: 0.5", "o": "namespace: a\nkvSpareTrigger: 0.6"},
            "key 'o' (merged onto default)",
        ),
    ],
)
def test_invalid_saturation_entries_are_rejected_with_a_clear_message(data: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_saturation_configmap(data)
    assert message in str(info.value)
    assert "wva-saturation-scaling-config" in str(info.value)


def test_budget_settings_are_refused_in_a_namespace_local_map() -> None:
    quota = "enableLimiter: true\nlimiters: [{type: quota, name: q, scope: cluster, quotas: {H100: 2}}]"
    with pytest.raises(ConfigError, match="honoured only on the global ConfigMap's default entry"):
        parse_saturation_configmap({"default": quota}, local=True)


def test_scale_to_zero_resolution() -> None:
    cm = parse_scale_to_zero_configmap(
        {
            "default": "enable_scale_to_zero: true\nretention_period: 5m",
            "llama": "model_id: llama\nenable_scale_to_zero: false",
            "granite": "model_id: granite\nretention_period: 1h30m",
        }
    )
    r = ThresholdResolver(scale_to_zero=cm)
    llama = r.scale_to_zero(ModelKey("ns", "llama"))
    assert (llama.enabled, llama.retention_seconds) == (False, 300)
    granite = r.scale_to_zero(ModelKey("ns", "granite"))
    assert (granite.enabled, granite.retention_seconds) == (True, 5400)
    # flag default applies when nothing is set
    assert ThresholdResolver(scale_to_zero_default=True).scale_to_zero(ModelKey("ns", "m")).enabled
    assert not ThresholdResolver().scale_to_zero(ModelKey("ns", "m")).enabled
    assert ThresholdResolver().scale_to_zero(ModelKey("ns", "m")).retention_seconds == 600
    # the saturation entry's inline scaleToZero wins over the scale-to-zero ConfigMap
    sat = parse_saturation_configmap({"granite#ns": "scaleToZero: {enabled: false}"})
    assert not ThresholdResolver(saturation=sat, scale_to_zero=cm).scale_to_zero(ModelKey("ns", "granite")).enabled


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"default": "retention_period: soon"}, "retention_period='soon': not a duration"),
        ({"default": "retention_period: 0s"}, "must be > 0"),
        ({"x": "enable_scale_to_zero: true"}, "needs model_id"),
        ({"default": "enable_scale_to_zero: maybe"}, "enable_scale_to_zero='maybe'"),
    ],
)
def test_invalid_scale_to_zero_entries(data: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match="wva-model-scale-to-zero-config") as info:
        parse_scale_to_zero_configmap(data)
    assert message in str(info.value)
