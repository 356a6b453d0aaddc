"""ConfigMap parsing (upstream format), per-namespace overrides, validation messages."""

from __future__ import annotations

import pytest

from epp.autoscale.thresholds import (
    ConfigError,
    SaturationConfig,
    ThresholdResolver,
    parse_saturation_configmap,
    parse_scale_to_zero_configmap,
)
from epp.autoscale.types import ModelKey
from epp.framework.saturation import Thresholds

UPSTREAM = {
    "default": (
        "kvCacheThreshold: 0.80\nqueueLengthThreshold: 5\nkvSpareTrigger: 0.1\nqueueSpareTrigger: 3\n"
        "enableLimiter: false\n"
    ),
    "granite-13b-production": (
        "model_id: ibm/granite-13b\nnamespace: production\nkvCacheThreshold: 0.85\nkvSpareTrigger: 0.15\n"
    ),
    "staging-wide": "namespace: staging\nqueueLengthThreshold: 10\n",
    "staging-llama": "model_id: llama\nnamespace: staging\nqueueSpareTrigger: 6\n",
}


def test_upstream_example_parses_and_resolves_overrides() -> None:
    r = ThresholdResolver(saturation=parse_saturation_configmap(UPSTREAM))
    assert r.saturation(ModelKey("production", "ibm/granite-13b")) == SaturationConfig(0.85, 5, 0.15, 3)
    # the same model in another namespace gets the default
    assert r.saturation(ModelKey("other", "ibm/granite-13b")) == SaturationConfig()
    # namespace-wide entry, then the model entry on top of it
    assert r.saturation(ModelKey("staging", "mistral")) == SaturationConfig(0.8, 10, 0.1, 3)
    assert r.saturation(ModelKey("staging", "llama")) == SaturationConfig(0.8, 10, 0.1, 6)


def test_namespace_local_configmap_replaces_global() -> None:
    global_map = parse_saturation_configmap({"default": "kvCacheThreshold: 0.7\nkvSpareTrigger: 0.2"})
    local = parse_saturation_configmap({"default": "queueLengthThreshold: 8"})
    r = ThresholdResolver(saturation=global_map, saturation_local={"team-a": local})
    assert r.saturation(ModelKey("team-a", "m")) == SaturationConfig(0.8, 8, 0.1, 3)  # not merged with global
    assert r.saturation(ModelKey("team-b", "m")) == SaturationConfig(0.7, 5, 0.2, 3)


def test_local_map_without_default_inherits_global_default() -> None:
    global_map = parse_saturation_configmap({"default": "queueSpareTrigger: 1"})
    local = parse_saturation_configmap({"x": "namespace: team-a\nmodel_id: m\nkvSpareTrigger: 0.3"})
    r = ThresholdResolver(saturation=global_map, saturation_local={"team-a": local})
    assert r.saturation(ModelKey("team-a", "m")) == SaturationConfig(0.8, 5, 0.3, 1)


def test_no_configmap_uses_shipped_defaults() -> None:
    assert ThresholdResolver().saturation(ModelKey("ns", "m")) == SaturationConfig(0.80, 5, 0.10, 3)


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
        ({"default": "kvCacheThresold: 0.8"}, "kvCacheThresold=0.8: Extra inputs are not permitted"),
        ({"default": "kvCacheThreshold: lots"}, "kvCacheThreshold='lots'"),
        ({"default": "[1, 2]"}, "expected a mapping of fields, got list"),
        ({"default": "a: [b"}, "not valid YAML"),
        ({"default": "enableLimiter: true"}, "GPU limiter is not supported"),
        ({"default": "analyzerName: saturation"}, "only the V1 saturation analyzer"),
        ({"x": "kvCacheThreshold: 0.9"}, "key 'x': an override entry needs a namespace"),
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


def test_scale_to_zero_resolution() -> None:
    cm = parse_scale_to_zero_configmap(
        {
            "default": "enable_scale_to_zero: true\nretention_period: 5m",
            "llama": "model_id: llama\nenable_scale_to_zero: false",
            "granite": "model_id: granite\nretention_period: 1h30m",
        }
    )
    r = ThresholdResolver(scale_to_zero=cm)
    assert (
        r.scale_to_zero(ModelKey("ns", "llama")).enabled,
        r.scale_to_zero(ModelKey("ns", "llama")).retention_seconds,
    ) == (False, 300)
    granite = r.scale_to_zero(ModelKey("ns", "granite"))
    assert (granite.enabled, granite.retention_seconds) == (True, 5400)
    # flag default applies when nothing is set
    assert ThresholdResolver(scale_to_zero_default=True).scale_to_zero(ModelKey("ns", "m")).enabled
    assert not ThresholdResolver().scale_to_zero(ModelKey("ns", "m")).enabled
    assert ThresholdResolver().scale_to_zero(ModelKey("ns", "m")).retention_seconds == 600


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
