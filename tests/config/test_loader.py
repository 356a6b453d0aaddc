"""EndpointPickerConfig: strict decoding, system defaults, validation rules, instantiation."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from scheduling_builders import NOW, names, request, state

from epp.clock import ManualClock
from epp.config.defaults import default_config
from epp.config.loader import ConfigError, LoadedConfig, load_config, load_default_config
from epp.config.picker_config import decode_config
from epp.errors import EppError
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind, PluginRegistry
from epp.plugins import register_in_tree
from epp.plugins.utilization_detector import UtilizationDetector

HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"

# Spec 4b.3: upstream's default config text, verbatim.
UPSTREAM_DEFAULT = (
    HEADER
    + """plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: metrics-data-source
- type: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors: [{pluginRef: core-metrics-extractor}]
"""
)


@pytest.fixture
def registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    return registry


@pytest.fixture
def context() -> PluginContext:
    return PluginContext(clock=ManualClock(start=NOW), seed=1)


def load(text: str, registry: PluginRegistry, context: PluginContext) -> LoadedConfig:
    return load_config(HEADER + text, registry, context)


def scorer_weights(loaded: LoadedConfig, profile: str = "default") -> list[tuple[str, float]]:
    return [(ws.scorer.typed_name.name, ws.weight) for ws in loaded.scheduler.profiles[profile].scorers]


def test_upstream_default_config_loads(registry: PluginRegistry, context: PluginContext) -> None:
    loaded = load_config(UPSTREAM_DEFAULT, registry, context)
    assert scorer_weights(loaded) == [
        ("queue-scorer", 2.0),
        ("kv-cache-utilization-scorer", 2.0),
        ("prefix-cache-scorer", 3.0),
    ]
    profile = loaded.scheduler.profiles["default"]
    assert profile.picker.typed_name.type == "max-score-picker"
    assert loaded.scheduler.profile_handler.typed_name.type == "single-profile-handler"
    assert isinstance(loaded.saturation_detector, UtilizationDetector)
    assert loaded.config.data_layer is not None
    assert loaded.config.data_layer.sources[0].extractors[0].plugin_ref == "core-metrics-extractor"
    assert [p.typed_name.type for p in loaded.pre_request] == ["approx-prefix-cache-producer"]
    # The injected defaults are part of the effective config.
    types = [p.type for p in loaded.config.plugins]
    assert types[-9:] == [
        "single-profile-handler",
        "max-score-picker",
        "utilization-detector",
        "openai-parser",  # the llm-d router's default parsers, fallback last
        "anthropic-parser",
        "vllmhttp-parser",
        "passthrough-parser",
        "approx-prefix-cache-producer",  # the scorer reads its data ...
        "token-producer",  # ... and it reads the tokenized prompt (upstream's estimate backend)
    ]
    assert loaded.config.request_handler is not None
    assert [r.plugin_ref for r in loaded.config.request_handler.parsers] == [
        "openai-parser",
        "anthropic-parser",
        "vllmhttp-parser",
        "passthrough-parser",
    ]
    assert loaded.config.flow_control is not None and loaded.config.flow_control.saturation_detector is not None
    assert loaded.config.flow_control.saturation_detector.plugin_ref == "utilization-detector"


def test_default_config_as_code(registry: PluginRegistry, context: PluginContext) -> None:
    loaded = load_default_config(registry, context)
    assert scorer_weights(loaded) == [  # upstream's default profile
        ("queue-scorer", 2.0),
        ("kv-cache-utilization-scorer", 2.0),
        ("prefix-cache-scorer", 3.0),
        ("lora-affinity-scorer", 1.0),
    ]
    assert loaded.scheduler.profiles["default"].picker.typed_name.type == "max-score-picker"
    assert loaded.scheduler.profile_handler.typed_name.type == "single-profile-handler"
    states = [state(0, queue=3, kv=0.2), state(1, queue=0, kv=0.1), state(2, queue=10, kv=0.2)]
    assert names(loaded.scheduler.schedule(request(), states).primary.targets) == ["pod-1"]
    # The model itself round-trips through the decoder.
    assert decode_config(default_config().model_dump_json(by_alias=True)) == default_config()


def test_loaded_config_is_immutable(registry: PluginRegistry, context: PluginContext) -> None:
    loaded = load_default_config(registry, context)
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.scheduler = None  # type: ignore[misc,assignment]
    with pytest.raises(TypeError):
        loaded.plugins["x"] = None  # type: ignore[index]
    with pytest.raises(ValueError, match="frozen"):
        loaded.config.kind = "Other"


def test_no_profiles_gets_a_default_profile_with_every_scheduling_plugin(
    registry: PluginRegistry, context: PluginContext
) -> None:
    loaded = load(
        """plugins:
- type: utilization-detector
- {name: q, type: queue-scorer}
- type: openai-parser
- {name: pick, type: random-picker}
""",
        registry,
        context,
    )
    profile = loaded.scheduler.profiles["default"]
    assert [f.typed_name.name for f in profile.filters] == ["utilization-detector"]
    assert scorer_weights(loaded) == [("q", 1.0)]
    assert profile.picker.typed_name.name == "pick"
    # The declared utilization-detector (by its default name) is also the saturation detector.
    assert loaded.saturation_detector is loaded.plugins["utilization-detector"]  # type: ignore[comparison-overlap]


def test_profile_without_picker_reuses_the_first_declared_picker(
    registry: PluginRegistry, context: PluginContext
) -> None:
    loaded = load(
        """plugins:
- {type: random-picker, parameters: {maxNumOfEndpoints: 2}}
- type: queue-scorer
- type: single-profile-handler
schedulingProfiles:
- name: only
  plugins: [{pluginRef: queue-scorer}]
""",
        registry,
        context,
    )
    assert loaded.scheduler.profiles["only"].picker is loaded.plugins["random-picker"]
    assert "max-score-picker" not in loaded.plugins
    assert scorer_weights(loaded, "only") == [("queue-scorer", 1.0)]


def test_a_fairness_policy_is_never_taken_for_a_profiles_picker(
    registry: PluginRegistry, context: PluginContext
) -> None:
    """Its ``pick`` shares a name with a picker's, but its type declares only the FairnessPolicy kind."""
    loaded = load(
        """featureGates: [flowControl]
plugins:
- type: round-robin-fairness-policy
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}]
flowControl:
  priorityBands: [{priority: 0, fairnessPolicyRef: round-robin-fairness-policy}]
""",
        registry,
        context,
    )
    assert loaded.scheduler.profiles["default"].picker is loaded.plugins["max-score-picker"]
    with pytest.raises(ConfigError, match=r"'round-robin-fairness-policy'.*is not a filter, scorer or picker"):
        load(
            """plugins:
- type: round-robin-fairness-policy
schedulingProfiles:
- name: default
  plugins: [{pluginRef: round-robin-fairness-policy}]
""",
            registry,
            context,
        )


class _Liar(NamedPlugin):
    """Declares the Scorer kind without a ``score`` method."""

    plugin_type = "liar"
    kinds = frozenset({PluginKind.SCORER})


def test_a_plugin_that_declares_a_kind_it_does_not_implement_is_refused(context: PluginContext) -> None:
    registry = PluginRegistry()
    register_in_tree(registry)
    registry.register("liar", lambda name, parameters, context: _Liar(name))
    with pytest.raises(ConfigError, match=r"plugins\[0\] \('liar', type 'liar'\): the type declares the Scorer kind"):
        load("plugins:\n- type: liar\n", registry, context)


def test_legacy_tree_config_routes_like_v0_3(registry: PluginRegistry, context: PluginContext) -> None:
    loaded = load(
        """plugins:
- type: legacy-filter-tree
- type: random-picker
schedulingProfiles:
- name: legacy
  plugins: [{pluginRef: legacy-filter-tree}, {pluginRef: random-picker}]
""",
        registry,
        context,
    )
    states = [state(0, queue=3, kv=0.2), state(1, queue=0, kv=0.1), state(2, queue=10, kv=0.2)]
    result = loaded.scheduler.schedule(request("my-model", target="my-model-12345", priority=1), states)
    assert names(result.primary.targets) == ["pod-1"]
    with pytest.raises(EppError, match="no endpoints available"):  # sheddable, no capacity → 429
        loaded.scheduler.schedule(request(priority=0), [state(0, queue=9)])


def test_saturation_detector_parameters_from_config(registry: PluginRegistry, context: PluginContext) -> None:
    loaded = load(
        """plugins:
- {name: sat, type: utilization-detector, parameters: {queueDepthThreshold: 9, metricsStalenessThreshold: 2s}}
saturationDetector: {pluginRef: sat}
""",
        registry,
        context,
    )
    assert isinstance(loaded.saturation_detector, UtilizationDetector)
    assert loaded.saturation_detector.thresholds.queue_depth == 9
    assert loaded.saturation_detector.thresholds.staleness_seconds == 2.0


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("plugins:\n- type: queue-scorer\n  paramters: {}\n", r"plugins\[0\]\.paramters: unknown field"),
        (
            "plugins: [{type: queue-scorer}]\n"
            "schedulingProfiles:\n- name: d\n  plugins:\n  - {pluginRef: queue-scorer, wieght: 2}\n",
            r"schedulingProfiles\[0\]\.plugins\[0\]\.wieght: unknown field",
        ),
        ("plugins: [{type: queue-scorer}]\nextra: 1\n", r"extra: unknown field"),
        (
            "plugins: [{type: queue-scorer}]\n"
            "schedulingProfiles:\n- name: d\n  plugins: [{pluginRef: queue-scorer, weight: '2'}]\n",
            r"schedulingProfiles\[0\]\.plugins\[0\]\.weight: Input should be a valid number \(got '2'\)",
        ),
        ("plugins: [{name: x}]\n", r"plugins\[0\]\.type: required field missing"),
        (
            "flowControl: {maxBytes: 1.5}\n",
            r"flowControl\.maxBytes: must be a quantity such as '1Gi' or an integer \(got 1.5\)",
        ),
        ("plugins: [{type: queue-scorer}]\nplugins: []\n", r"duplicate key 'plugins' at line 4"),
        ("plugins: [\n", r"invalid EndpointPickerConfig YAML"),
    ],
)
def test_strict_decoding_names_the_path(
    text: str, message: str, registry: PluginRegistry, context: PluginContext
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(text, registry, context)


def test_api_version_and_kind_are_checked(registry: PluginRegistry, context: PluginContext) -> None:
    with pytest.raises(
        ConfigError,
        match=r"apiVersion: must be 'llm-d.ai/v1alpha1' \(or the deprecated 'inference.networking.x-k8s.io/v1alpha1'\) "
        r"\(got 'v1'\)",
    ):
        load_config("apiVersion: v1\nkind: EndpointPickerConfig\n", registry, context)
    with pytest.raises(ConfigError, match=r"kind: required field missing"):
        load_config("apiVersion: inference.networking.x-k8s.io/v1alpha1\n", registry, context)
    with pytest.raises(ConfigError, match=r"must be a mapping, got list"):
        load_config("- 1\n", registry, context)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("featureGates: [flowControl, warpDrive]\n", r"featureGates\[1\]: unknown feature gate 'warpDrive'"),
        (
            "plugins: [{type: queue-scorer}, {type: queue-scorer}]\n",
            r"plugins\[1\]\.name: duplicate plugin name 'queue-scorer'",
        ),
        ("plugins: [{type: no-such-plugin}]\n", r"plugins\[0\]\.type: unknown plugin type 'no-such-plugin'"),
        (
            "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{name: a}, {name: a}]\n",
            r"schedulingProfiles\[1\]\.name: duplicate profile name 'a'",
        ),
        (
            "plugins: [{type: queue-scorer}]\nschedulingProfiles: [{name: a, plugins: [{pluginRef: missing}]}]\n",
            r"schedulingProfiles\[0\]\.plugins\[0\]\.pluginRef: references undefined plugin 'missing'",
        ),
        (
            "plugins: [{type: queue-scorer}]\n"
            "schedulingProfiles: [{name: a, plugins: [{pluginRef: queue-scorer}, {pluginRef: queue-scorer}]}]\n",
            r"plugin 'queue-scorer' referenced twice in profile 'a'",
        ),
        (
            "plugins: [{type: max-score-picker, parameters: {maxNumOfEndpoints: 0}}]\n",
            r"plugins\[0\] \('max-score-picker', type 'max-score-picker'\)\.parameters: "
            r".*maxNumOfEndpoints: must be >= 1, got 0",
        ),
        (
            "plugins: [{type: single-profile-handler}, {name: h2, type: single-profile-handler}]\n",
            r"at most one profile handler is allowed, got \['h2', 'single-profile-handler'\]",
        ),
        (
            "plugins: [{type: single-profile-handler}, {type: random-picker}]\n"
            "schedulingProfiles: [{name: a}, {name: b}]\n",
            r"schedulingProfiles: single-profile-handler allows exactly one profile, got 2",
        ),
        (
            "plugins: [{type: random-picker}]\nschedulingProfiles: [{name: a}, {name: b}]\n",
            r"plugins: 2 scheduling profiles need a profile handler plugin",
        ),
        (
            "plugins: [{type: random-picker}, {type: max-score-picker}]\nschedulingProfiles:\n"
            "- {name: a, plugins: [{pluginRef: random-picker}, {pluginRef: max-score-picker}]}\n",
            r"schedulingProfiles\[0\] \('a'\): exactly one picker is required, "
            r"got \['random-picker', 'max-score-picker'\]",
        ),
        (
            "plugins: [{type: openai-parser}]\n"
            "schedulingProfiles: [{name: a, plugins: [{pluginRef: openai-parser}]}]\n",
            r"schedulingProfiles\[0\]\.plugins\[0\]\.pluginRef: "
            r"plugin 'openai-parser' \(type 'openai-parser'\) is not a filter, scorer or picker",
        ),
        (
            "plugins: [{type: queue-scorer}]\nsaturationDetector: {pluginRef: sat}\n",
            r"saturationDetector\.pluginRef: references undefined plugin 'sat'",
        ),
        (
            "plugins: [{type: queue-scorer}]\nsaturationDetector: {pluginRef: queue-scorer}\n",
            r"saturationDetector\.pluginRef: "
            r"plugin 'queue-scorer' \(type 'queue-scorer'\) is not a saturation detector",
        ),
        ("parser: {pluginRef: my-parser}\n", r"parser\.pluginRef: references undefined plugin 'my-parser'"),
        (
            "dataLayer: {sources: [{pluginRef: src}]}\n",
            r"dataLayer\.sources\[0\]\.pluginRef: references undefined plugin 'src'",
        ),
        (
            "plugins: [{name: max-score-picker, type: queue-scorer}]\n",
            r"the default 'max-score-picker' plugin cannot be added, the name is taken by a 'queue-scorer' plugin",
        ),
    ],
)
def test_validation_rules(text: str, message: str, registry: PluginRegistry, context: PluginContext) -> None:
    with pytest.raises(ConfigError, match=message):
        load(text, registry, context)


def test_unregistered_types_are_refused_until_registered(context: PluginContext) -> None:
    registry = PluginRegistry()
    with pytest.raises(ConfigError, match=r"unknown plugin type 'queue-scorer'"):
        load_config(UPSTREAM_DEFAULT, registry, context)
    register_in_tree(registry)
    assert "prefix-cache-scorer" in load_config(UPSTREAM_DEFAULT, registry, context).plugins


def test_documented_examples_load(registry: PluginRegistry, context: PluginContext) -> None:
    doc = (Path(__file__).parents[2] / "docs" / "scheduling.md").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", doc, re.S)
    assert len(blocks) == 5  # the shared precise index, P/D, SLO-aware routing, the v0.3 tree, the reference
    for block in blocks:
        assert load_config(block, registry, context).scheduler.profiles
