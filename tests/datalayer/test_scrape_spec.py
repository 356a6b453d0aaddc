"""The scrape spec: the configuration's data layer over GIE's flags, interval rounding, TLS files, custom metrics."""

from __future__ import annotations

from pathlib import Path

import pytest
from model_server_tls import client_cert, server_tls

from epp.config.options import ModelServerMetricsOptions
from epp.datalayer.engines import read
from epp.datalayer.scrape_spec import ScrapeSpecError, build_scrape_spec, effective_interval
from epp.framework.datalayer import MetricsSourceSpec, ScrapeSpec, Transport
from epp.framework.engine_metrics import ENGINES, CustomMetric, EngineSpec, EngineTable
from epp.framework.metric_spec import MetricSelector, parse_selector
from epp.framework.plugin import PluginContext
from epp.plugins import core_metrics_extractor

FLAGS = ModelServerMetricsOptions(
    scheme="https",
    path="/flag/metrics",
    https_insecure_skip_verify=False,
    queued_requests_metric="flag_queue",
)


def test_neither_config_nor_flags_is_todays_default() -> None:
    spec = build_scrape_spec(None, None, ModelServerMetricsOptions())
    assert spec == ScrapeSpec()
    assert spec.transport == Transport(scheme="http", path="/metrics", port=None, verify=False)
    assert spec.interval is None and spec.tls is None and spec.notes == ()
    assert spec.engines.engines["vllm"] is ENGINES["vllm"]


def test_flags_fill_what_the_source_leaves_out() -> None:
    spec = build_scrape_spec(MetricsSourceSpec(), None, FLAGS)
    assert spec.transport == Transport(scheme="https", path="/flag/metrics", verify=True)
    assert spec.tls is not None and spec.tls.check_hostname  # the system CAs check the server
    assert spec.engines.engines["sglang"].queued == (MetricSelector("flag_queue"),)  # a built-in, overridden


def test_what_the_source_sets_wins_over_the_flags() -> None:
    source = MetricsSourceSpec(scheme="http", path="/metrics", insecure_skip_verify=True, port=9400, interval=1.0)
    spec = build_scrape_spec(source, None, FLAGS)
    assert spec.transport == Transport(scheme="http", path="/metrics", port=9400, verify=False)
    assert spec.tls is None and spec.interval == 1.0


def test_an_engine_the_config_defines_keeps_its_names_under_the_metric_flags() -> None:
    params = {"engineConfigs": [{"name": "sglang", "queuedRequestsSpec": "mine"}]}
    table = core_metrics_extractor.create("x", params, PluginContext()).engine_table
    spec = build_scrape_spec(None, table, FLAGS)
    assert spec.engines.engines["sglang"].queued == (MetricSelector("mine"),)
    assert spec.engines.engines["vllm"].queued == (MetricSelector("flag_queue"),)
    assert build_scrape_spec(None, table, ModelServerMetricsOptions()).engines is table  # no flags: as configured


@pytest.mark.parametrize(
    ("requested", "base", "effective"),
    [
        (None, 0.05, 0.05),  # omitted: every base tick
        (0.0, 0.05, 0.05),
        (1.0, 0.05, 1.0),
        (1.0, 0.3, 0.9),  # 3.33 ticks → 3
        (1.0, 0.4, 1.2),  # 2.5 ticks → 3 (half up, as Go's math.Round)
        (0.075, 0.05, 0.1),  # 1.5 ticks → 2, in integer nanoseconds
        (0.2, 1.0, 0.2),  # shorter than the base: the tick drops to it
        (0.01, 1.0, 0.05),  # but not below 50 ms
        (0.01, 0.02, 0.02),  # nor below a base already that short: at least one tick
    ],
)
def test_interval_rounding(requested: float | None, base: float, effective: float) -> None:
    assert effective_interval(requested, base) == pytest.approx(effective)


def test_tls_files_over_http_and_a_ca_while_not_verifying_have_no_effect_and_say_so(tmp_path: Path) -> None:
    http = build_scrape_spec(MetricsSourceSpec(ca_cert_path="/x/ca.pem"), None, ModelServerMetricsOptions())
    assert http.tls is None and http.transport.ca_cert_path == ""
    assert http.notes == ("caCertPath: no effect, the scheme is http (no TLS)",)
    _, ca = server_tls(tmp_path, "127.0.0.2")
    skipped = build_scrape_spec(
        MetricsSourceSpec(scheme="https", ca_cert_path=str(ca)), None, ModelServerMetricsOptions()
    )
    assert skipped.transport.verify is False and skipped.transport.ca_cert_path == ""
    assert len(skipped.notes) == 1 and "caCertPath has no effect while insecureSkipVerify is true" in skipped.notes[0]
    checked = MetricsSourceSpec(scheme="https", ca_cert_path=str(ca), insecure_skip_verify=False)
    spec = build_scrape_spec(checked, None, ModelServerMetricsOptions())
    assert spec.notes == () and spec.transport.ca_cert_path == str(ca) and spec.tls is not None


def test_unreadable_tls_files_are_errors_naming_the_parameter(tmp_path: Path) -> None:
    missing = MetricsSourceSpec(scheme="https", insecure_skip_verify=False, ca_cert_path=str(tmp_path / "none.pem"))
    with pytest.raises(ScrapeSpecError, match="caCertPath: cannot load a CA bundle from"):
        build_scrape_spec(missing, None, ModelServerMetricsOptions())
    (tmp_path / "empty.pem").write_text("not a certificate\n")
    empty = MetricsSourceSpec(scheme="https", insecure_skip_verify=False, ca_cert_path=str(tmp_path / "empty.pem"))
    with pytest.raises(ScrapeSpecError, match="caCertPath"):
        build_scrape_spec(empty, None, ModelServerMetricsOptions())
    cert, _ = client_cert(tmp_path)
    wrong_key = MetricsSourceSpec(scheme="https", client_cert_path=str(cert), client_key_path=str(cert))
    with pytest.raises(ScrapeSpecError, match="clientCertPath/clientKeyPath: cannot load"):
        build_scrape_spec(wrong_key, None, ModelServerMetricsOptions())


def test_custom_metrics_land_on_the_snapshot_and_keep_their_last_value() -> None:
    engine = EngineSpec(
        name="e",
        queued=(parse_selector("q"),),
        running=(),
        kv_usage=(),
        custom=(
            CustomMetric("custom.depth", parse_selector("depth{tier=gold}")),
            CustomMetric("custom.temp", parse_selector("gpu_temp")),
        ),
    )
    first = read(b'q 1\ndepth{tier="silver"} 9\ndepth{tier="gold"} 4\ngpu_temp 71.5\n', engine, updated_at=1.0)
    assert first.errors == () and first.snapshot.custom == {"custom.depth": 4.0, "custom.temp": 71.5}
    second = read(b"gpu_temp 70\n", engine, previous=first.snapshot, updated_at=2.0)
    assert second.updated and second.snapshot.updated_at == 2.0  # a custom metric alone refreshes the snapshot
    assert second.snapshot.custom == {"custom.depth": 4.0, "custom.temp": 70.0}
    assert "custom metric 'custom.depth': depth{tier=\"gold\"} not found" in second.errors
    assert read(b"q 1\n", ENGINES["vllm"]).snapshot.custom == {}  # engines without custom metrics: none


def test_the_default_table_reads_unlabelled_pods_as_vllm() -> None:
    assert EngineTable().lookup({}).name == "vllm"
