"""/metrics and /healthz over real HTTP on a loopback port."""

from __future__ import annotations

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from epp.clock import ManualClock
from epp.datalayer.pool_gauges import PoolGauges
from epp.datalayer.scraper import ScrapeSeries
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import MetricsSnapshot
from epp.labels import parse_selector
from epp.picker_series import declare_picker_series
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_server import MetricsServer


async def test_serves_our_registry_refreshed_before_each_scrape() -> None:
    clock = ManualClock()
    store = Datastore()
    store.set_pool(PoolSpec("my-pool", "llm", parse_selector("app=vllm"), (8000,)))
    store.upsert_pod(PodInfo("p", "llm", "10.0.0.1", labels={"app": "vllm"}, ready=True))
    metrics = EppMetrics()
    declare_picker_series(metrics)
    metrics.series(ScrapeSeries).errors.labels(reason="timeout").inc(3)
    gauges = PoolGauges(store, metrics, clock)
    server = MetricsServer(metrics, before_scrape=[gauges.refresh])
    port = await server.start("127.0.0.1", 0)
    try:
        assert port > 0
        async with aiohttp.ClientSession() as session:
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                assert resp.status == 200
                assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
                first = await resp.text()
            store.endpoints()[0].metrics = MetricsSnapshot(waiting_queue=7, updated_at=clock.now())
            async with session.get(f"http://127.0.0.1:{port}/metrics") as resp:
                second = await resp.text()
            async with session.get(f"http://127.0.0.1:{port}/healthz") as resp:
                assert (resp.status, await resp.text()) == (200, "ok")
            async with session.get(
                f"http://127.0.0.1:{port}/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"}
            ) as resp:
                assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
                assert (await resp.text()).endswith("# EOF\n")
    finally:
        await server.stop()
        await server.stop()
    assert 'inference_pool_ready_pods{name="my-pool"} 0.0' in first
    assert 'inference_pool_ready_pods{name="my-pool"} 1.0' in second
    assert 'inference_pool_per_pod_queue_size{model_server_pod="p-rank-0",name="my-pool"} 7.0' in second
    assert 'epp_scrape_errors_total{reason="timeout"} 3.0' in second
    assert (  # the default naming (both) says which twin replaces each GIE series, as the llm-d router does
        "# HELP inference_pool_ready_pods [ALPHA] [Deprecated: Use llm_d_epp_ready_endpoints] "
        "The number of ready pods in the inference server pool."
    ) in second
    assert 'llm_d_epp_per_endpoint_queue_size{model_server_endpoint="p-rank-0",name="my-pool"} 7.0' in second
    assert "_created" not in second  # like upstream (Go), no *_created series
    names = {f.name for f in text_string_to_metric_families(second)}
    assert {"inference_objective_request", "inference_extension_info", "epp_scrape_duration_seconds"} <= names


async def test_failing_hook_does_not_break_the_scrape_and_double_start_is_refused() -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    metrics = EppMetrics()
    declare_picker_series(metrics)
    server = MetricsServer(metrics, before_scrape=[broken])
    port = await server.start("127.0.0.1", 0)
    try:
        with pytest.raises(RuntimeError, match="already started"):
            await server.start("127.0.0.1", 0)
        async with aiohttp.ClientSession() as session, session.get(f"http://127.0.0.1:{port}/metrics") as resp:
            assert resp.status == 200
            assert "inference_extension_info" in await resp.text()
    finally:
        await server.stop()


async def test_port_in_use_is_an_error_and_leaves_nothing_running() -> None:
    first = MetricsServer(EppMetrics())
    port = await first.start("127.0.0.1", 0)
    try:
        with pytest.raises(OSError):
            await MetricsServer(EppMetrics()).start("127.0.0.1", port)
    finally:
        await first.stop()
