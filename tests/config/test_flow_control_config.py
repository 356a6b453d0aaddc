"""The flowControl section with its gate: defaults, templates, policy references and the errors that name the field."""

from __future__ import annotations

import pytest

from epp.clock import ManualClock
from epp.config.loader import ConfigError, LoadedConfig, load_config
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.plugins.flow_policies import EdfOrdering, FcfsOrdering, GlobalStrictFairness, RoundRobinFairness

HEAD = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n"


@pytest.fixture
def registry() -> PluginRegistry:
    r = PluginRegistry()
    register_in_tree(r)
    return r


def load(text: str, registry: PluginRegistry) -> LoadedConfig:
    return load_config(HEAD + text, registry, PluginContext(clock=ManualClock()))


def test_the_gate_alone_gives_the_llm_d_defaults(registry: PluginRegistry) -> None:
    settings = load("", registry).flow_control
    assert settings is not None
    assert (settings.max_bytes, settings.max_requests, settings.ttl, settings.no_endpoint_ttl) == (0, 0, 60.0, 60.0)
    band = settings.band_for(3)
    assert (band.priority, band.max_bytes, band.max_requests) == (3, 1_000_000_000, 5000)
    assert isinstance(band.fairness, GlobalStrictFairness) and isinstance(band.ordering, FcfsOrdering)
    assert settings.usage_limit.ceilings(0.0, [3]) == [1.0]


def test_bands_inherit_from_the_default_band(registry: PluginRegistry) -> None:
    settings = load(
        "plugins:\n- type: round-robin-fairness-policy\n- {name: edf, type: edf-ordering-policy}\n"
        "flowControl:\n  maxBytes: 10Gi\n  maxRequests: 1k\n  defaultRequestTTL: 0s\n  noEndpointRequestTTL: 5m\n"
        "  defaultPriorityBand: {maxRequests: 50, fairnessPolicyRef: round-robin-fairness-policy}\n"
        "  defaultNegativePriorityBand: {maxRequests: 3}\n"
        "  priorityBands:\n  - {priority: 100, maxBytes: 5Gi, orderingPolicyRef: edf}\n",
        registry,
    ).flow_control
    assert settings is not None
    assert (settings.max_bytes, settings.max_requests, settings.ttl, settings.no_endpoint_ttl) == (
        10 * 2**30,
        1000,
        0.0,
        300.0,
    )
    top = settings.band_for(100)
    assert (top.max_bytes, top.max_requests) == (5 * 2**30, 50)
    assert isinstance(top.fairness, RoundRobinFairness) and isinstance(top.ordering, EdfOrdering)
    assert settings.band_for(-1).max_requests == 3 and settings.band_for(1).max_requests == 50


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "flowControl: {enableEviction: true}\n",
            r"flowControl\.enableEviction: in-flight eviction .* not implemented",
        ),
        (
            "flowControl: {priorityBands: [{priority: 1}, {priority: 1}]}\n",
            r"flowControl\.priorityBands\[1\]\.priority: duplicate priority 1",
        ),
        ("flowControl: {priorityBands: [{maxRequests: 1}]}\n", r"flowControl\.priorityBands\[0\]\.priority: required"),
        ("flowControl: {maxBytes: lots}\n", r"flowControl\.maxBytes: invalid quantity 'lots'"),
        ("flowControl: {maxRequests: -1}\n", r"flowControl\.maxRequests: must not be negative"),
        ("flowControl: {defaultRequestTTL: -1s}\n", r"flowControl\.defaultRequestTTL: must not be negative"),
        (
            "flowControl: {defaultPriorityBand: {fairnessPolicyRef: fair}}\n",
            r"flowControl\.defaultPriorityBand\.fairnessPolicyRef: references undefined plugin 'fair'",
        ),
        (
            "plugins: [{type: queue-scorer}]\n"
            "flowControl: {priorityBands: [{priority: 1, orderingPolicyRef: queue-scorer}]}\n",
            r"flowControl\.priorityBands\[0\]\.orderingPolicyRef: plugin 'queue-scorer' .* is not a OrderingPolicy",
        ),
        (
            "plugins: [{type: fcfs-ordering-policy}]\nflowControl: {usageLimitPolicyPluginRef: fcfs-ordering-policy}\n",
            r"flowControl\.usageLimitPolicyPluginRef: .* is not a usage-limit policy",
        ),
    ],
)
def test_bad_sections_are_refused_naming_the_field(text: str, message: str, registry: PluginRegistry) -> None:
    with pytest.raises(ConfigError, match=message):
        load(text, registry)


def test_a_detector_for_the_queue(registry: PluginRegistry) -> None:
    loaded = load(
        "plugins: [{type: concurrency-detector, parameters: {maxConcurrency: 8}}]\n"
        "flowControl: {saturationDetector: {pluginRef: concurrency-detector}}\n",
        registry,
    )
    assert loaded.saturation_detector.typed_name.type == "concurrency-detector"
