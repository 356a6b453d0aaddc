"""EndpointPickerConfig in both API groups: llm-d.ai's keys, the renamed ones, gates, and what we run without."""

from __future__ import annotations

import logging

import pytest
from scheduling_builders import NOW

from epp.clock import ManualClock
from epp.config.compat import ConfigNotice
from epp.config.config_series import publish_notices
from epp.config.loader import ConfigError, LoadedConfig, load_config
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.telemetry.metrics import EppMetrics

LLM_D = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
GIE = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
DETECTORS = """plugins:
- {name: strict, type: utilization-detector, parameters: {queueDepthThreshold: 2}}
- {name: lenient, type: utilization-detector, parameters: {queueDepthThreshold: 50}}
- type: queue-scorer
"""
DEPRECATED_GROUP = ConfigNotice(
    "apiVersion",
    "inference.networking.x-k8s.io/v1alpha1 is deprecated, use llm-d.ai/v1alpha1",
    deprecated=True,
)


@pytest.fixture
def registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    return registry


@pytest.fixture
def context() -> PluginContext:
    return PluginContext(clock=ManualClock(start=NOW), seed=1)


def detector_name(loaded: LoadedConfig) -> str:
    return loaded.saturation_detector.typed_name.name  # type: ignore[attr-defined, no-any-return]


@pytest.mark.parametrize("header", [LLM_D, GIE])
def test_one_schema_in_both_groups_only_gie_s_is_deprecated(
    header: str, registry: PluginRegistry, context: PluginContext
) -> None:
    text = header + DETECTORS + "flowControl: {saturationDetector: {pluginRef: strict}}\n"
    loaded = load_config(text, registry, context)
    assert detector_name(loaded) == "strict"
    assert (DEPRECATED_GROUP in loaded.notices) == (header == GIE)


def test_renamed_keys_old_spelling_honoured_new_one_wins(registry: PluginRegistry, context: PluginContext) -> None:
    old = load_config(LLM_D + DETECTORS + "saturationDetector: {pluginRef: lenient}\n", registry, context)
    assert detector_name(old) == "lenient"
    assert [n.setting for n in old.notices] == ["saturationDetector"]
    both = load_config(
        LLM_D
        + DETECTORS
        + "saturationDetector: {pluginRef: lenient}\nflowControl: {saturationDetector: {pluginRef: strict}}\n",
        registry,
        context,
    )
    assert detector_name(both) == "strict"
    empty = load_config(LLM_D + "flowControl: {saturationDetector: {}}\n", registry, context)
    assert detector_name(empty) == "utilization-detector"  # upstream: an empty reference means the default

    parser = load_config(
        LLM_D + "plugins: [{name: p, type: openai-parser}]\nparser: {pluginRef: p}\n", registry, context
    )
    assert parser.config.request_handler is not None
    assert [p.plugin_ref for p in parser.config.request_handler.parsers] == ["p"]
    assert [n.setting for n in parser.notices] == ["parser"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            DETECTORS + "saturationDetector: {pluginRef: nope}\n",
            r"^saturationDetector\.pluginRef: references undefined plugin 'nope'$",  # the key the file used
        ),
        (
            DETECTORS + "flowControl: {saturationDetector: {pluginRef: queue-scorer}}\n",
            r"flowControl\.saturationDetector\.pluginRef: plugin 'queue-scorer' \(type 'queue-scorer'\) "
            r"is not a saturation detector",
        ),
        (
            "plugins: [{type: queue-scorer}]\nrequestHandler: {parsers: [{pluginRef: queue-scorer}]}\n",
            r"requestHandler\.parsers\[0\]\.pluginRef: plugin 'queue-scorer' \(type 'queue-scorer'\) is not a parser",
        ),
        (
            "plugins: [{type: queue-scorer}]\ndataLayer: {discovery: {pluginRef: queue-scorer}}\n",
            r"dataLayer\.discovery\.pluginRef: plugin 'queue-scorer' .* is not an endpoint discovery plugin",
        ),
        (
            "plugins: [{type: queue-scorer}]\ndataLayer: {crossReplicaSyncerPluginRef: queue-scorer}\n",
            r"dataLayer\.crossReplicaSyncerPluginRef: .* is not a cross-replica syncer",
        ),
        (
            "dataLayer: {peerDiscovery: {pluginRef: peers}}\n",
            r"dataLayer\.peerDiscovery\.pluginRef: references undefined",
        ),
        ("flowControl: {noEndpointRequestTTL: soon}\n", r"flowControl\.noEndpointRequestTTL: invalid duration 'soon'"),
        ("flowControl: {enableEviction: 'yes'}\n", r"flowControl\.enableEviction: Input should be a valid boolean"),
        (
            "featureGates: [flowControl=maybe]\n",
            r"featureGates\[0\]: 'maybe' is not a valid value for the feature gate",
        ),
        ("featureGates: [warpDrive=true]\n", r"featureGates\[0\]: unknown feature gate 'warpDrive'"),
        ("requestHandler: {parsers: [{}]}\n", r"requestHandler\.parsers\[0\]\.pluginRef: required field missing"),
    ],
)
def test_llm_d_keys_are_validated(text: str, message: str, registry: PluginRegistry, context: PluginContext) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config(LLM_D + text, registry, context)


def test_every_llm_d_key_loads(registry: PluginRegistry, context: PluginContext) -> None:
    text = LLM_D + (
        "featureGates: [flowControl=false, haPopulateNonLeaderDatastore]\n"
        "plugins:\n- type: queue-scorer\n- type: utilization-detector\n- type: openai-parser\n"
        "- type: metrics-data-source\n- type: core-metrics-extractor\n"
        "schedulingProfiles: [{name: default, plugins: [{pluginRef: queue-scorer, weight: 2}]}]\n"
        "dataLayer:\n  injectDefaults: true\n  crossReplicaSyncInterval: 5s\n"
        "  sources: [{pluginRef: metrics-data-source, extractors: [{pluginRef: core-metrics-extractor}]}]\n"
        "requestHandler: {parsers: [{pluginRef: openai-parser}]}\n"
        "flowControl:\n  saturationDetector: {pluginRef: utilization-detector}\n"
    )
    loaded = load_config(text, registry, context)
    assert loaded.feature_gates == {"haPopulateNonLeaderDatastore"}
    assert loaded.notices == ()


def test_settings_we_run_without_are_reported_and_counted(registry: PluginRegistry, context: PluginContext) -> None:
    metrics = EppMetrics()
    text = LLM_D + (  # the flowControl section without its gate: a warning and a metric, as upstream
        "featureGates: [haPopulateNonLeaderDatastore=false]\n"
        "flowControl:\n  maxRequests: 1k\n  defaultRequestTTL: 30s\n"
        "  defaultNegativePriorityBand: {priority: -1, maxRequests: 10}\n"
        "dataLayer: {injectDefaults: false}\n"
    )
    loaded = load_config(text, registry, context)

    def ignored(setting: str) -> float | None:
        return metrics.registry.get_sample_value("epp_config_ignored_settings", {"setting": setting})

    assert ignored("flowControl") is None  # loading publishes nothing: the runtime does, once it is in force
    publish_notices(loaded.notices, metrics)
    assert [n.setting for n in loaded.notices] == [
        "flowControl",
        "featureGates.haPopulateNonLeaderDatastore",
        "dataLayer",
    ]
    assert loaded.feature_gates == set() and loaded.flow_control is None
    assert ignored("flowControl") == 1 and ignored("dataLayer") == 1
    gated = load_config(LLM_D + "featureGates: [flowControl]\n" + text.split("\n", 3)[3], registry, context)
    publish_notices(gated.notices, metrics)
    assert gated.flow_control is not None and gated.flow_control.max_requests == 1000
    assert ignored("flowControl") == 0  # with the gate the section takes effect
    publish_notices(load_config(LLM_D + "flowControl: {saturationDetector: {}}\n", registry, context).notices, metrics)
    assert ignored("flowControl") == 0  # a saturation detector only

    gie_no_scraping = load_config(GIE + "dataLayer: {sources: []}\n", registry, context)  # GIE's way to say it
    assert [n.setting for n in gie_no_scraping.notices] == ["apiVersion", "dataLayer"]
    llm_d_scraping = load_config(LLM_D + "dataLayer: {sources: []}\n", registry, context)  # llm-d injects the source
    assert llm_d_scraping.notices == ()


def test_each_notice_is_logged_once_per_load(caplog: pytest.LogCaptureFixture) -> None:
    ignored = ConfigNotice("flowControl", "not here")
    with caplog.at_level(logging.WARNING, logger="epp.config.compat"):
        publish_notices([DEPRECATED_GROUP, ignored, DEPRECATED_GROUP, ignored], EppMetrics())  # two pools, one file
    assert [(r.getMessage(), r.setting) for r in caplog.records] == [  # type: ignore[attr-defined]
        ("deprecated configuration setting", "apiVersion"),
        ("configuration setting has no effect", "flowControl"),
    ]


def test_deprecated_plugin_types_are_notices_and_loading_logs_nothing(
    registry: PluginRegistry, context: PluginContext, caplog: pytest.LogCaptureFixture
) -> None:
    text = LLM_D + (
        "plugins:\n"
        "- {type: by-label, parameters: {label: role, validValues: [decode]}}\n"
        "- {type: by-label-selector, parameters: {matchLabels: {role: decode}}}\n"
        "- type: queue-scorer\n"
    )
    with caplog.at_level(logging.DEBUG, logger="epp"):
        loaded = load_config(text, registry, context)
    assert caplog.records == []  # a load may be refused and dropped: it logs nothing (the runtime publishes)
    deprecated = [(n.setting, n.detail) for n in loaded.notices if n.deprecated]
    assert deprecated == [
        (
            "plugins[0].type",
            "plugin 'by-label': by-label is deprecated, upstream removes it in v0.11; use 'label-selector-filter'",
        ),
        (
            "plugins[1].type",
            "plugin 'by-label-selector': by-label-selector is deprecated, upstream removes it in v0.11; "
            "use 'label-selector-filter'",
        ),
    ]
