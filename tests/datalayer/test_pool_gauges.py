"""inference_pool_* gauges: averages and ready count over fresh endpoints, per-endpoint series, periodic refresh."""

from __future__ import annotations

import pytest

from epp.clock import ManualClock
from epp.datalayer.pool_gauges import PoolGauges
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.staleness import Staleness
from epp.labels import parse_selector
from epp.telemetry.metrics import EppMetrics
from epp_sim.waits import wait_until

NS = "llm"


def value(metrics: EppMetrics, series: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(series, labels)


def setup(clock: ManualClock, pool_name: str = "pool") -> tuple[Datastore, EppMetrics]:
    store = Datastore()
    store.set_pool(PoolSpec(pool_name, NS, parse_selector("app=vllm"), (8000,)))
    for i, (queue, running, kv, age) in enumerate([(4, 10, 0.5, 0.1), (2, 6, 0.25, 1.9), (9, 2, 0.9, 2.5)]):
        store.upsert_pod(PodInfo(f"p{i}", NS, f"10.0.0.{i}", labels={"app": "vllm"}, ready=True))
        state = store.endpoints()[i]
        state.metrics = MetricsSnapshot(
            waiting_queue=queue, running=running, kv_cache_usage=kv, updated_at=clock.now() - age
        )
    return store, EppMetrics()


def test_refresh_computes_averages_ready_count_and_per_pod_queues() -> None:
    clock = ManualClock()
    store, metrics = setup(clock)
    PoolGauges(store, metrics, clock, staleness=Staleness(2.0)).refresh()
    # Over the fresh endpoints only, as upstream: p2's metrics are 2.5 s old.
    assert value(metrics, "inference_pool_average_kv_cache_utilization", name="pool") == pytest.approx(0.75 / 2)
    assert value(metrics, "inference_pool_average_queue_size", name="pool") == pytest.approx(3.0)
    assert value(metrics, "inference_pool_average_running_requests", name="pool") == pytest.approx(8.0)
    assert value(metrics, "inference_pool_ready_pods", name="pool") == 2
    for pod, queue in (("p0-rank-0", 4), ("p1-rank-0", 2), ("p2-rank-0", 9)):
        assert value(metrics, "inference_pool_per_pod_queue_size", name="pool", model_server_pod=pod) == queue


def test_ready_count_follows_the_clock_and_removed_endpoints_lose_their_series() -> None:
    clock = ManualClock()
    store, metrics = setup(clock)
    lenient = EppMetrics()
    PoolGauges(store, lenient, clock, staleness=Staleness(10.0)).refresh()
    assert value(lenient, "inference_pool_ready_pods", name="pool") == 3  # the threshold is the one given
    gauges = PoolGauges(store, metrics, clock, staleness=Staleness(2.0))
    clock.advance(0.5)
    store.remove_pod(NS, "p0")
    gauges.refresh()
    assert value(metrics, "inference_pool_ready_pods", name="pool") == 0
    assert value(metrics, "inference_pool_per_pod_queue_size", name="pool", model_server_pod="p0-rank-0") is None
    # No endpoint is fresh: the averages say nothing (upstream would keep their last values).
    assert value(metrics, "inference_pool_average_queue_size", name="pool") == 0
    assert value(metrics, "inference_pool_average_kv_cache_utilization", name="pool") == 0


def test_renamed_pool_moves_its_series_and_an_empty_or_cleared_pool_reports_nothing_stale() -> None:
    clock = ManualClock()
    store, metrics = setup(clock)
    gauges = PoolGauges(store, metrics, clock)
    gauges.refresh()
    store.set_pool(PoolSpec("renamed", NS, parse_selector("app=vllm"), (8000,)))
    gauges.refresh()
    assert value(metrics, "inference_pool_ready_pods", name="pool") is None
    assert value(metrics, "inference_pool_per_pod_queue_size", name="pool", model_server_pod="p0-rank-0") is None
    assert value(metrics, "inference_pool_average_queue_size", name="renamed") == pytest.approx(3.0)
    store.set_pool(PoolSpec("renamed", NS, parse_selector("app=none"), (8000,)))
    gauges.refresh()
    assert value(metrics, "inference_pool_ready_pods", name="renamed") == 0
    assert value(metrics, "inference_pool_average_kv_cache_utilization", name="renamed") == 0
    assert value(metrics, "inference_pool_per_pod_queue_size", name="renamed", model_server_pod="p1-rank-0") is None
    store.clear_pool()
    gauges.refresh()
    assert value(metrics, "inference_pool_ready_pods", name="renamed") is None


async def test_periodic_refresh_runs_on_the_injected_clock() -> None:
    clock = ManualClock()
    store, metrics = setup(clock)
    gauges = PoolGauges(store, metrics, clock, interval=5.0)
    await gauges.start()
    try:
        await wait_until(lambda: value(metrics, "inference_pool_ready_pods", name="pool") == 2)
        await wait_until(lambda: clock.sleepers == 1)
        clock.advance(0.5)  # p1 goes stale, but the next refresh is not due yet
        await wait_until(lambda: clock.sleepers == 1)
        assert value(metrics, "inference_pool_ready_pods", name="pool") == 2
        clock.advance(4.5)  # refresh due: every endpoint's metrics are now older than 2 s
        await wait_until(lambda: value(metrics, "inference_pool_ready_pods", name="pool") == 0)
    finally:
        await gauges.stop()
        await gauges.stop()


def test_invalid_settings_are_rejected() -> None:
    with pytest.raises(ValueError, match="interval"):
        PoolGauges(Datastore(), EppMetrics(), ManualClock(), interval=0)
    with pytest.raises(ValueError, match="staleness threshold must be > 0"):
        Staleness(0)


def test_per_endpoint_metrics_age_and_scrape_interval_follow_the_clock_and_the_pool() -> None:
    clock = ManualClock()
    store, metrics = setup(clock)
    p0 = store.endpoints()[0]
    p0.metrics = MetricsSnapshot(updated_at=clock.now() - 0.1, scrape_interval=0.052)
    store.upsert_pod(PodInfo("new", NS, "10.0.0.9", labels={"app": "vllm"}, ready=True))  # never scraped
    gauges = PoolGauges(store, metrics, clock)
    gauges.refresh()

    def age(pod: str) -> float | None:
        return value(metrics, "epp_endpoint_metrics_age_seconds", name="pool", model_server_endpoint=pod)

    def interval(pod: str) -> float | None:
        return value(metrics, "epp_endpoint_scrape_interval_seconds", name="pool", model_server_endpoint=pod)

    assert age("p0-rank-0") == pytest.approx(0.1) and age("p2-rank-0") == pytest.approx(2.5)
    assert interval("p0-rank-0") == 0.052 and interval("p1-rank-0") is None  # one scrape only: no interval yet
    assert age("new-rank-0") is None and interval("new-rank-0") is None
    clock.advance(1.0)
    store.remove_pod(NS, "p0")
    gauges.refresh()
    assert age("p1-rank-0") == pytest.approx(2.9)
    assert age("p0-rank-0") is None and interval("p0-rank-0") is None
