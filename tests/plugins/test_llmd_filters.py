"""The llm-d router's filters: label selectors, by-label, utilization, endpoint attribute, prefix-cache affinity."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from epp.framework.data import DataScope
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, PrefixCacheMatches
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import Plugin, PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins import (
    by_label_filter,
    endpoint_attribute_filter,
    label_selector_filter,
    prefix_cache_affinity_filter,
    utilization_filter,
)


def _state(
    name: str,
    labels: Mapping[str, str] | None = None,
    *,
    queue: int = 0,
    running: int = 0,
    kv: float = 0.0,
    custom: Mapping[str, float] | None = None,
) -> EndpointState:
    endpoint = Endpoint(namespace="ns", name=name, pod_name=name, address="10.0.0.1", port=8000, labels=labels or {})
    metrics = MetricsSnapshot(waiting_queue=queue, running=running, kv_cache_usage=kv, custom=custom or {})
    return EndpointState(endpoint, metrics)


def _names(states: list[EndpointState]) -> list[str]:
    return [s.endpoint.name for s in states]


def _run(plugin: Any, candidates: list[EndpointState], request: InferenceRequest | None = None) -> list[str]:
    return _names(plugin.filter(CycleState(), request or InferenceRequest(request_id="r"), candidates))


PODS = [
    _state("a", {"inference-role": "decode", "hw": "H100"}),
    _state("b", {"inference-role": "decode", "hw": "A100"}),
    _state("c", {"inference-role": "prefill"}),
    _state("d"),
]


def test_label_selector_match_labels_and_expressions() -> None:
    create = label_selector_filter.create
    assert _run(create("f", {"matchLabels": {"inference-role": "decode"}}, PluginContext()), PODS) == ["a", "b"]
    both = {"matchLabels": {"inference-role": "decode", "hw": "H100"}}
    assert _run(create("f", both, PluginContext()), PODS) == ["a"]
    expr = {"matchExpressions": [{"key": "hw", "operator": "In", "values": ["A100", "L4"]}]}
    assert _run(create("f", expr, PluginContext()), PODS) == ["b"]
    assert _run(
        create("f", {"matchExpressions": [{"key": "hw", "operator": "DoesNotExist"}]}, PluginContext()), PODS
    ) == [
        "c",
        "d",
    ]
    notin = {"matchExpressions": [{"key": "inference-role", "operator": "NotIn", "values": ["prefill"]}]}
    assert _run(create("f", notin, PluginContext()), PODS) == ["a", "b", "d"]
    assert _run(create("f", {}, PluginContext()), PODS) == ["a", "b", "c", "d"]  # the empty selector


def test_deprecated_by_label_selector_is_the_same_filter_under_its_old_type() -> None:
    flt = label_selector_filter.create_deprecated("old", {"matchLabels": {"hw": "H100"}}, PluginContext())
    assert flt.typed_name.type == "by-label-selector"
    assert _run(flt, PODS) == ["a"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"matchExpressions": [{"key": "hw", "operator": "Like", "values": ["x"]}]}, "matchExpressions[0].operator"),
        ({"matchExpressions": [{"key": "hw", "operator": "In"}]}, "needs values"),
        ({"matchExpressions": [{"key": "hw", "operator": "Exists", "values": ["x"]}]}, "matchExpressions[0].values"),
        ({"matchLabels": {"hw": 3}}, "matchLabels"),
        ({"matchLabel": {"hw": "x"}}, "matchLabel"),
    ],
)
def test_label_selector_refuses_what_it_cannot_read(params: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginConfigError, match=re.escape(field)):
        label_selector_filter.create("f", params, PluginContext())


def test_by_label_values_and_missing_label() -> None:
    create = by_label_filter.create
    assert _run(create("f", {"label": "hw", "validValues": ["A100"]}, PluginContext()), PODS) == ["b"]
    with_none = {"label": "hw", "validValues": ["A100"], "allowsNoLabel": True}
    assert _run(create("f", with_none, PluginContext()), PODS) == ["b", "c", "d"]
    assert _run(create("f", {"label": "hw", "allowsNoLabel": True}, PluginContext()), PODS) == ["c", "d"]
    with pytest.raises(PluginConfigError, match="label"):
        create("f", {"validValues": ["x"]}, PluginContext())
    with pytest.raises(PluginConfigError, match="allowsNoLabel"):
        create("f", {"label": "hw"}, PluginContext())


def test_utilization_filter_caps_every_metric() -> None:
    pods = [_state("a", queue=0, running=10, kv=0.5), _state("b", queue=3, running=50), _state("c", kv=0.95)]
    pods[1].in_flight_requests = 7
    params = {
        "conditions": [
            {"metric": "running-requests", "maxValue": 40},
            {"metric": "waiting-queue", "maxValue": 0},
            {"metric": "kv-cache-utilization", "maxValue": 0.8},
        ]
    }
    assert _run(utilization_filter.create("f", params, PluginContext()), pods) == ["a"]
    active = {"conditions": [{"metric": "active-requests", "maxValue": 5}]}
    assert _run(utilization_filter.create("f", active, PluginContext()), pods) == ["a", "c"]
    none = {
        "conditions": [{"metric": "waiting-queue", "maxValue": 0}, {"metric": "kv-cache-utilization", "maxValue": 0}]
    }
    assert _run(utilization_filter.create("f", none, PluginContext()), pods) == []
    fallback = dict(none, fallbackOnEmpty=True)
    assert _run(utilization_filter.create("f", fallback, PluginContext()), pods) == ["a", "b", "c"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({}, "conditions"),
        ({"conditions": [{"metric": "gpu", "maxValue": 1}]}, "conditions[0].metric"),
        ({"conditions": [{"metric": "waiting-queue"}]}, "conditions[0].maxValue"),
        ({"conditions": [{"metric": "waiting-queue", "maxValue": -1}]}, "conditions[0].maxValue"),
        ({"conditions": [{"metric": "kv-cache-utilization", "maxValue": 1.5}]}, "conditions[0].maxValue"),
    ],
)
def test_utilization_filter_bad_parameters(params: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginConfigError, match=re.escape(field)):
        utilization_filter.create("f", params, PluginContext())


def _threshold(op: str, value: float, **extra: Any) -> dict[str, Any]:
    return {
        "attribute": "gpu_util",
        "algorithm": {"type": "threshold", "threshold": {"operator": op, "value": value}},
        **extra,
    }


def test_endpoint_attribute_filter_thresholds_and_missing_policy() -> None:
    pods = [_state("a", custom={"gpu_util": 0.5}), _state("b", custom={"gpu_util": 0.95}), _state("c")]
    create = endpoint_attribute_filter.create
    assert _run(create("f", _threshold("LessThanOrEqual", 0.9), PluginContext()), pods) == ["a", "c"]
    assert _run(create("f", _threshold("LessThanOrEqual", 0.9, onMissing="Fail"), PluginContext()), pods) == ["a"]
    assert _run(create("f", _threshold("GreaterThan", 0.9), PluginContext()), pods) == ["b", "c"]
    assert _run(create("f", _threshold("Equal", 0.5, onMissing="Fail"), PluginContext()), pods) == ["a"]
    assert _run(create("f", _threshold("NotEqual", 0.5, onMissing="Fail"), PluginContext()), pods) == ["b"]
    strict = _threshold("LessThan", 0.1, onMissing="Fail")
    assert _run(create("f", strict, PluginContext()), pods) == []
    assert _run(create("f", dict(strict, fallbackOnEmpty=True), PluginContext()), pods) == ["a", "b", "c"]
    explicit = _threshold("LessThan", 0.9, producer="core-metrics-extractor")
    assert _run(create("f", explicit, PluginContext()), pods) == ["a", "c"]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        (_threshold("Between", 1), "algorithm.threshold"),
        ({"attribute": "x", "algorithm": {"type": "percentile"}}, "algorithm.type"),
        ({"attribute": "x"}, "algorithm"),
        (_threshold("LessThan", 1, producer="dcgm-extractor"), "producer"),
        (dict(_threshold("LessThan", 1), attribute="GPUUtilization/dcgm-extractor"), "attribute"),
        (_threshold("LessThan", 1, onMissing="Drop"), "onMissing"),
    ],
)
def test_endpoint_attribute_filter_bad_parameters(params: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginConfigError, match=re.escape(field)):
        endpoint_attribute_filter.create("f", params, PluginContext())


def _affinity(**params: Any) -> prefix_cache_affinity_filter.PrefixCacheAffinityFilter:
    flt = prefix_cache_affinity_filter.create("f", params, PluginContext(seed=1))
    flt.bind_data_scope(DataScope.of(flt))
    return flt


def _matched(pods: list[EndpointState], blocks: list[int], total: int) -> InferenceRequest:
    """A request whose prefix-match info (of the default producer) holds ``blocks`` of ``total`` per pod."""
    request = InferenceRequest(request_id="r")
    matches = PrefixCacheMatches({p.endpoint.key: b for p, b in zip(pods, blocks, strict=True)}, total, 16)
    request.attributes[PREFIX_CACHE_MATCH_INFO.id] = matches
    return request


def test_prefix_affinity_keeps_sticky_endpoints_until_they_are_too_slow() -> None:
    pods = [_state("a"), _state("b"), _state("c")]
    flt = _affinity()
    assert _run(flt, pods, _matched(pods, [10, 9, 1], 10)) == ["a", "b"]  # 1.0 and 0.9 ≥ 0.8
    assert _run(flt, pods, _matched(pods, [7, 1, 0], 10)) == ["a", "b", "c"]  # none sticky: all kept
    assert _run(flt, pods) == ["a", "b", "c"]  # no prefix-match info: all kept
    pods[0].in_flight_tokens = pods[1].in_flight_tokens = 400_000  # ~25 s of prefill queued on each
    assert _run(flt, pods, _matched(pods, [10, 9, 1], 10)) == ["a", "b", "c"]  # the TTFT gate breaks stickiness
    assert _run(_affinity(maxTTFTPenaltyMs=0), pods, _matched(pods, [10, 9, 1], 10)) == ["a", "b"]  # always stick
    fresh = pods[:2] + [_state("c")]
    assert _run(_affinity(explorationProbability=1.0), fresh, _matched(fresh, [10, 9, 1], 10)) == ["a", "b", "c"]


def test_prefix_affinity_reads_the_default_producers_matches_or_the_named_ones() -> None:
    default = prefix_cache_affinity_filter.create("f", {}, PluginContext())
    assert [k.id for k in default.consumes().required] == [PREFIX_CACHE_MATCH_INFO.id]
    named = prefix_cache_affinity_filter.create("f", {"prefixMatchInfoProducerName": "burst"}, PluginContext())
    assert [k.id for k in named.consumes().required] == ["PrefixCacheMatchInfoDataKey/burst"]
    # ttftSource latencyPredictor reads predicted-latency-producer's predictions: refused when there is none
    predicted = prefix_cache_affinity_filter.create("f", {"ttftSource": "latencyPredictor"}, PluginContext())
    with pytest.raises(PluginConfigError, match="declare a predicted-latency-producer"):
        predicted.resolve_references(lambda where, name: _undefined(name))
    prefix_cache_affinity_filter.create("f", {"ttftSource": "latencyPredictor", "maxTTFTPenaltyMs": 0}, PluginContext())
    with pytest.raises(PluginConfigError, match="affinityThreshold"):
        prefix_cache_affinity_filter.create("f", {"affinityThreshold": 1.5}, PluginContext())


def _undefined(name: str) -> Plugin:
    raise ValueError(f"undefined plugin {name!r}")
