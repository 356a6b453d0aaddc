"""metrics-data-source and core-metrics-extractor: their parameters, checked, become the scrape's parts."""

from __future__ import annotations

from typing import Any

import pytest

from epp.framework.datalayer import MetricsSourceSpec
from epp.framework.engine_metrics import ENGINES, CacheInfoSpec, CustomMetric, EngineSpec
from epp.framework.metric_spec import MetricSelector
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.plugins import core_metrics_extractor, metrics_data_source


def source(**params: Any) -> MetricsSourceSpec:
    return metrics_data_source.create("src", params, PluginContext()).source


def extractor(**params: Any) -> core_metrics_extractor.CoreMetricsExtractor:
    return core_metrics_extractor.create("ext", params, PluginContext())


def test_a_source_without_parameters_sets_nothing_so_flags_and_defaults_apply() -> None:
    assert source() == MetricsSourceSpec()


def test_a_source_keeps_what_it_sets() -> None:
    got = source(
        scheme="https",
        path="/prometheus/metrics",
        port=9400,
        insecureSkipVerify=False,
        caCertPath="/etc/ca.pem",
        clientCertPath="/etc/tls.crt",
        clientKeyPath="/etc/tls.key",
        interval="1s",
    )
    assert got == MetricsSourceSpec(
        scheme="https",
        path="/prometheus/metrics",
        port=9400,
        insecure_skip_verify=False,
        ca_cert_path="/etc/ca.pem",
        client_cert_path="/etc/tls.crt",
        client_key_path="/etc/tls.key",
        interval=1.0,
    )
    assert source(interval="").interval is None and source(interval="0").interval is None  # every base tick
    assert source(interval="250ms").interval == 0.25


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"scheme": "ftp"}, r"metrics-data-source\.parameters\.scheme: must be http or https, got 'ftp'"),
        ({"path": "metrics"}, r"parameters\.path: must start with '/'"),
        ({"port": 0}, r"parameters\.port: must be >= 1"),
        ({"port": 70000}, r"parameters\.port: must be <= 65535"),
        ({"insecureSkipVerify": "false"}, r"parameters\.insecureSkipVerify: must be a boolean"),
        ({"clientCertPath": "/tls.crt"}, r"clientCertPath and clientKeyPath go together"),
        ({"clientKeyPath": "/tls.key"}, r"clientCertPath and clientKeyPath go together"),
        ({"interval": "soon"}, r"parameters\.interval: must be a duration"),
        ({"interval": "-1s"}, r"parameters\.interval: must not be negative"),
        ({"caCertPath": 3}, r"parameters\.caCertPath: must be a string"),
        ({"sheme": "http"}, r"metrics-data-source\.parameters: unknown field\(s\) \['sheme'\]"),
    ],
)
def test_bad_source_parameters_name_the_field(params: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        source(**params)


def test_an_extractor_without_parameters_is_the_built_in_table() -> None:
    table = extractor().engine_table
    assert dict(table.engines) == dict(ENGINES)
    assert (table.default_engine, table.label_key, table.configured) == ("vllm", "llm-d.ai/engine-type", frozenset())
    assert set(table.engines) == {"vllm", "sglang", "trtllm-serve", "triton-tensorrt-llm", "triton"}


def test_engine_configs_add_engines_and_replace_built_ins_whole() -> None:
    table = extractor(
        defaultEngine="my-engine",
        engineLabelKey="example.com/engine",
        engineConfigs=[
            {
                "name": "my-engine",
                "queuedRequestsSpec": "custom_queue_size{status=waiting}",
                "runningRequestsSpec": "custom_running_size",
                "kvUsageSpec": "custom_cache_utilization",
                "cacheInfoSpec": "custom_cache_info",
                "cacheBlockSizeLabelName": "page",
                "customMetrics": [{"attributeKey": "custom.queue_depth", "metricSpec": "custom_depth{tier=gold}"}],
            },
            {"name": "vllm", "queuedRequestsSpec": "my_waiting"},  # replaces vLLM's map: the rest is off
        ],
    ).engine_table
    assert (table.default_engine, table.label_key) == ("my-engine", "example.com/engine")
    assert table.configured == {"my-engine", "vllm"}
    assert table.engines["my-engine"] == EngineSpec(
        name="my-engine",
        queued=(MetricSelector("custom_queue_size", (("status", "waiting"),)),),
        running=(MetricSelector("custom_running_size"),),
        kv_usage=(MetricSelector("custom_cache_utilization"),),
        cache_info=CacheInfoSpec(MetricSelector("custom_cache_info"), "page", "num_gpu_blocks"),
        custom=(CustomMetric("custom.queue_depth", MetricSelector("custom_depth", (("tier", "gold"),))),),
    )
    assert table.engines["vllm"] == EngineSpec(
        name="vllm", queued=(MetricSelector("my_waiting"),), running=(), kv_usage=()
    )
    assert table.engines["sglang"] is ENGINES["sglang"]  # built-ins not named stay


def test_the_engine_label_its_gie_fallback_and_the_default_engine() -> None:
    table = extractor(defaultEngine="sglang").engine_table
    assert table.lookup({}).name == "sglang"
    assert table.lookup({"llm-d.ai/engine-type": "trtllm-serve"}).name == "trtllm-serve"
    assert table.lookup({"inference.networking.k8s.io/engine-type": "triton"}).name == "triton"  # GIE's label
    both = {"llm-d.ai/engine-type": "vllm", "inference.networking.k8s.io/engine-type": "triton"}
    assert table.lookup(both).name == "vllm"  # the configured key wins
    assert table.lookup({"llm-d.ai/engine-type": "nonesuch"}).name == "sglang"  # unknown: the default
    assert table.label_value({"llm-d.ai/engine-type": "nonesuch"}) == "nonesuch"
    custom_key = extractor(engineLabelKey="example.com/engine").engine_table
    assert custom_key.lookup({"example.com/engine": "sglang", "llm-d.ai/engine-type": "triton"}).name == "sglang"
    assert custom_key.lookup({"inference.networking.k8s.io/engine-type": "triton"}).name == "triton"


@pytest.mark.parametrize(
    ("params", "message"),
    [
        (
            {"defaultEngine": "tgi"},
            r"parameters\.defaultEngine: 'tgi' is neither a built-in engine nor in engineConfigs",
        ),
        ({"engineConfigs": [{"queuedRequestsSpec": "q"}]}, r"engineConfigs\[0\]\.name: must be a non-empty string"),
        ({"engineConfigs": [{"name": "default"}]}, r"engineConfigs\[0\]\.name: 'default' is reserved"),
        (
            {"engineConfigs": [{"name": "e"}, {"name": "e"}]},
            r"engineConfigs\[1\]\.name: engine 'e' is configured twice",
        ),
        (
            {"engineConfigs": [{"name": "e", "kvUsageSpec": "kv{=x}"}]},
            r"engineConfigs\[0\]\.kvUsageSpec: cannot parse label matcher",
        ),
        (
            {"engineConfigs": [{"name": "e", "queueSpec": "q"}]},
            r"engineConfigs\[0\]: unknown field\(s\) \['queueSpec'\]",
        ),
        ({"engineConfigs": {"name": "e"}}, r"core-metrics-extractor\.parameters\.engineConfigs: must be a list"),
        ({"engineConfigs": ["vllm"]}, r"engineConfigs\[0\]: must be a mapping"),
        (
            {"engineConfigs": [{"name": "e", "customMetrics": [{"metricSpec": "m"}]}]},
            r"engineConfigs\[0\]\.customMetrics\[0\]\.attributeKey: must be a non-empty string",
        ),
        (
            {"engineConfigs": [{"name": "e", "customMetrics": [{"attributeKey": "a"}]}]},
            r"customMetrics\[0\]\.metricSpec: must be a metric spec",
        ),
        (
            {
                "engineConfigs": [
                    {
                        "name": "e",
                        "customMetrics": [
                            {"attributeKey": "a", "metricSpec": "m"},
                            {"attributeKey": "a", "metricSpec": "n"},
                        ],
                    }
                ]
            },
            r"customMetrics\[1\]\.attributeKey: 'a' is used twice",
        ),
        ({"defaultEngne": "vllm"}, r"core-metrics-extractor\.parameters: unknown field\(s\) \['defaultEngne'\]"),
    ],
)
def test_bad_extractor_parameters_name_the_field(params: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        extractor(**params)
