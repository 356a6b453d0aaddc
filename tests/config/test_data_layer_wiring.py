"""dataLayer wiring: which metrics-data-source and core-metrics-extractor a loaded config scrapes with."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from epp.config.config_series import publish_notices
from epp.config.loader import ConfigError, LoadedConfig, load_config, load_default_config
from epp.config.options import ModelServerMetricsOptions
from epp.datalayer.http_client import SessionClient
from epp.datalayer.scrape_spec import build_scrape_spec
from epp.framework.datalayer import ScrapeSpec, Transport
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.plugins import register_in_tree
from epp.telemetry.metrics import EppMetrics
from epp_sim.precise_prefix import llm_d_precise_sample

LLM_D = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
GIE = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
BUILD = functools.partial(build_scrape_spec, flags=ModelServerMetricsOptions())


@pytest.fixture
def registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    return registry


def load(text: str, registry: PluginRegistry) -> LoadedConfig:
    """Loaded as ``epp serve`` does: with the shared HTTP client in the plugins' context (never used here)."""
    return load_config(text, registry, PluginContext(http=SessionClient()), build_scrape=BUILD)


def scrape(loaded: LoadedConfig) -> ScrapeSpec:
    assert loaded.scrape is not None
    return loaded.scrape


def test_the_chart_style_config_declares_the_plugins_and_the_default_wiring_uses_them(registry: PluginRegistry) -> None:
    loaded = load(
        LLM_D + "plugins:\n- type: queue-scorer\n"
        "- {type: metrics-data-source, parameters: {scheme: http, path: /metrics, insecureSkipVerify: true}}\n"
        "- {type: core-metrics-extractor, parameters: {defaultEngine: sglang}}\n",
        registry,
    )
    assert scrape(loaded).engines.default_engine == "sglang"
    assert loaded.config.data_layer is not None
    (source,) = loaded.config.data_layer.sources  # the effective config says what was wired
    assert (source.plugin_ref, [e.plugin_ref for e in source.extractors]) == (
        "metrics-data-source",
        ["core-metrics-extractor"],
    )
    assert loaded.notices == ()


def test_no_data_layer_plugins_inject_the_defaults(registry: PluginRegistry) -> None:
    loaded = load_default_config(registry, PluginContext(), build_scrape=BUILD)
    assert scrape(loaded) == ScrapeSpec()
    assert {"metrics-data-source", "core-metrics-extractor"} <= set(loaded.plugins)
    assert load_default_config(registry, PluginContext()).scrape is None  # no builder: only checked


def test_explicit_sources_with_their_own_names(registry: PluginRegistry) -> None:
    loaded = load(
        LLM_D + "plugins:\n- {name: pods, type: metrics-data-source, parameters: {path: /custom, port: 9400}}\n"
        "- {name: engines, type: core-metrics-extractor, parameters: {defaultEngine: triton}}\n"
        "dataLayer: {sources: [{pluginRef: pods, extractors: [{pluginRef: engines}]}]}\n",
        registry,
    )
    spec = scrape(loaded)
    assert spec.transport == Transport(path="/custom", port=9400) and spec.engines.default_engine == "triton"
    assert "metrics-data-source" not in loaded.plugins  # nothing injected beside a listed source
    assert loaded.notices == ()


def test_a_data_layer_plugin_left_out_of_the_wiring_is_reported(registry: PluginRegistry) -> None:
    loaded = load(
        LLM_D + "plugins:\n- {name: mine, type: core-metrics-extractor, parameters: {defaultEngine: sglang}}\n",
        registry,
    )
    assert scrape(loaded).engines.default_engine == "vllm"  # upstream wires the one *named* core-metrics-extractor
    assert [(n.setting, n.detail) for n in loaded.notices] == [
        (
            "dataLayer",
            "plugin 'mine' (type 'core-metrics-extractor') is not wired in dataLayer.sources, "
            "so it has no effect (as upstream)",
        )
    ]  # in epp_config_ignored_settings{setting="dataLayer"} once in force (compat.publish_notices)


def test_opted_out_or_gie_section_scrapes_with_flags_and_defaults(registry: PluginRegistry) -> None:
    for text in (LLM_D + "dataLayer: {injectDefaults: false}\n", GIE + "dataLayer: {sources: []}\n"):
        loaded = load(text, registry)
        assert scrape(loaded) == ScrapeSpec() and "metrics-data-source" not in loaded.plugins
        assert "dataLayer" in [n.setting for n in loaded.notices]  # "this picker always scrapes"
    gie_without_section = load(
        GIE + "plugins: [{type: core-metrics-extractor, parameters: {defaultEngine: sglang}}]\n", registry
    )
    assert scrape(gie_without_section).engines.default_engine == "sglang"  # GIE injects when there is no section


def test_a_ca_bundle_that_is_not_used_is_reported_and_an_unreadable_one_rejects_the_config(
    registry: PluginRegistry, tmp_path: Path
) -> None:
    unused = load(
        LLM_D + "plugins: [{type: metrics-data-source, parameters: {scheme: https, caCertPath: /x}}]\n", registry
    )
    (notice,) = unused.notices
    assert notice.setting == "dataLayer" and notice.detail.startswith(
        "plugin 'metrics-data-source': caCertPath has no effect while insecureSkipVerify is true"
    )
    missing = tmp_path / "missing.pem"
    params = f"{{scheme: https, insecureSkipVerify: false, caCertPath: {missing}}}"
    text = f"plugins: [{{type: metrics-data-source, parameters: {params}}}]\n"
    with pytest.raises(
        ConfigError,
        match=r"plugin 'metrics-data-source' \(type 'metrics-data-source'\)\.parameters\.caCertPath: cannot load",
    ):
        load(LLM_D + text, registry)


_PRECISE_SAMPLE = llm_d_precise_sample()


def test_upstream_precise_prefix_sample_loads_with_its_endpoint_notification_source(registry: PluginRegistry) -> None:
    loaded = load(LLM_D + _PRECISE_SAMPLE, registry)
    # Every plugin is wired; only the index's own metrics switch has no effect here, and says so.
    assert [n.setting for n in loaded.notices] == ["indexerConfig.kvBlockIndexConfig.enableMetrics"]
    assert "llm_d_epp_kv_cache_index_*" in loaded.notices[0].detail
    quiet = load(LLM_D + llm_d_precise_sample(enable_metrics=False), registry)
    assert quiet.notices == ()
    spec = scrape(loaded)
    assert spec.engines.default_engine == "vllm"  # the metrics source is the scraped one, the other is not
    producer = loaded.plugins["precise-prefix-cache-producer"]
    assert producer in loaded.endpoints_added and producer in loaded.endpoint_observers
    assert producer.block_size_tokens == 64  # type: ignore[attr-defined]


def test_upstream_index_logging_and_event_worker_settings_load_and_say_they_have_no_effect(
    registry: PluginRegistry,
) -> None:
    """llm-d's samples set metricsLoggingInterval (nanoseconds, a Go duration) and kvEventsConfig.concurrency."""
    text = (
        llm_d_precise_sample()
        .replace("enableMetrics: true", "enableMetrics: true\n          metricsLoggingInterval: 60000000000")
        .replace("tokenProcessorConfig:", "kvEventsConfig:\n        concurrency: 32\n      tokenProcessorConfig:")
    )
    loaded = load(LLM_D + text, registry)
    notices = {n.setting: n.detail for n in loaded.notices}
    assert set(notices) == {"indexerConfig.kvBlockIndexConfig.enableMetrics", "kvEventsConfig.concurrency"}
    assert "metricsLoggingInterval" in notices["indexerConfig.kvBlockIndexConfig.enableMetrics"]
    assert "no worker pool" in notices["kvEventsConfig.concurrency"]
    metrics = EppMetrics()
    publish_notices(loaded.notices, metrics)  # as the runtime does once the configuration is in force
    setting = {"setting": "kvEventsConfig.concurrency"}
    assert metrics.registry.get_sample_value("epp_config_ignored_settings", setting) == 1
    for bad, where in (
        (text.replace("concurrency: 32", "concurrency: 0"), "kvEventsConfig.concurrency"),
        (text.replace("60000000000", "'1m'"), "metricsLoggingInterval"),
    ):
        with pytest.raises(ConfigError, match=where):
            load(LLM_D + bad, registry)


def test_an_endpoint_notification_source_left_out_of_the_wiring_is_reported(registry: PluginRegistry) -> None:
    loaded = load(LLM_D + "plugins: [{type: endpoint-notification-source}]\n", registry)
    assert [(n.setting, n.detail) for n in loaded.notices] == [
        (
            "dataLayer",
            "plugin 'endpoint-notification-source' (type 'endpoint-notification-source') is not wired in "
            "dataLayer.sources, so it has no effect (as upstream)",
        )
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "plugins: [{name: a, type: metrics-data-source}, {name: b, type: metrics-data-source},\n"
            "  {type: core-metrics-extractor}]\n"
            "dataLayer: {sources: [{pluginRef: a, extractors: [{pluginRef: core-metrics-extractor}]}, "
            "{pluginRef: b, extractors: [{pluginRef: core-metrics-extractor}]}]}\n",
            r"dataLayer\.sources: \['a', 'b'\]: this picker runs one metrics source per endpoint",
        ),
        (
            "plugins: [{type: metrics-data-source}]\ndataLayer: {sources: [{pluginRef: metrics-data-source}]}\n",
            r"dataLayer\.sources\[0\]\.extractors: \[\]: the metrics-data-source 'metrics-data-source' needs",
        ),
        (
            "plugins: [{type: queue-scorer}, {type: core-metrics-extractor}]\n"
            "dataLayer: {sources: [{pluginRef: queue-scorer, extractors: [{pluginRef: core-metrics-extractor}]}]}\n",
            r"sources\[0\]\.pluginRef: plugin 'queue-scorer' \(type 'queue-scorer'\) is not a metrics source",
        ),
        (
            "plugins: [{type: metrics-data-source}, {type: queue-scorer}]\n"
            "dataLayer: {sources: [{pluginRef: metrics-data-source, extractors: [{pluginRef: queue-scorer}]}]}\n",
            r"extractors\[0\]\.pluginRef: plugin 'queue-scorer' \(type 'queue-scorer'\) is not a metrics extractor",
        ),
        (
            "plugins: [{type: endpoint-notification-source}, {type: queue-scorer}]\n"
            "dataLayer: {sources: [{pluginRef: endpoint-notification-source,\n"
            "  extractors: [{pluginRef: queue-scorer}]}]}\n",
            r"sources\[0\]\.extractors\[0\]\.pluginRef: plugin 'queue-scorer' \(type 'queue-scorer'\) is not an "
            r"endpoint extractor",
        ),
        (
            "plugins: [{type: endpoint-notification-source, parameters: {kind: Pod}}]\n",
            r"endpoint-notification-source\.parameters: unknown field\(s\) \['kind'\]",
        ),
        (
            "plugins: [{name: metrics-data-source, type: queue-scorer}]\n",
            r"plugin 'metrics-data-source' \(type 'queue-scorer'\) is not a metrics source",
        ),
        (
            "plugins: [{type: core-metrics-extractor, parameters: {defaultEngine: tgi}}]\n",
            r"plugins\[0\] \('core-metrics-extractor', type 'core-metrics-extractor'\)\.parameters: "
            r"core-metrics-extractor\.parameters\.defaultEngine: 'tgi'",
        ),
    ],
)
def test_wiring_errors_name_the_field(text: str, message: str, registry: PluginRegistry) -> None:
    with pytest.raises(ConfigError, match=message):
        load(LLM_D + text, registry)
