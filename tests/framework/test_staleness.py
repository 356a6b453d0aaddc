"""Staleness: one definition for every reader, never-scraped metrics always stale, thresholds kept apart."""

from __future__ import annotations

import pytest

from epp.clock import ManualClock
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.staleness import Staleness
from epp.labels import parse_selector
from epp.plugins.utilization_detector import UtilizationDetector
from epp.requestcontrol.healthy import healthy_candidates


def test_stale_is_older_than_the_threshold_and_never_scraped_is_always_stale() -> None:
    staleness = Staleness(2.0)
    assert not staleness.is_stale(MetricsSnapshot(updated_at=98.0), 100.0)  # exactly the threshold: fresh
    assert staleness.is_stale(MetricsSnapshot(updated_at=97.9), 100.0)
    assert staleness.is_stale(MetricsSnapshot(), 100.0)
    assert staleness.is_stale(MetricsSnapshot(), 0.5)  # even before the threshold has elapsed once
    for updated_at, now in ((98.0, 100.0), (97.9, 100.0), (0.0, 100.0), (0.0, 0.5), (0.2, 0.5)):
        snapshot = MetricsSnapshot(updated_at=updated_at)
        assert (snapshot.updated_at >= staleness.fresh_since(now)) is not staleness.is_stale(snapshot, now)
    with pytest.raises(ValueError, match="must be > 0"):
        Staleness(0.0)


def test_a_never_scraped_endpoint_is_not_in_service_early_in_a_clock() -> None:
    """A clock younger than the threshold (a test's, or a monotonic clock just after boot) must not make an
    endpoint that was never scraped look fresh to the health tiers."""
    store = Datastore()
    store.set_pool(
        PoolSpec("pool", "ns", parse_selector("app=vllm"), (8000,)),
        [PodInfo(f"p{i}", "ns", f"10.0.0.{i}", labels={"app": "vllm"}, ready=True) for i in range(2)],
    )
    scraped, never = store.endpoints()
    scraped.metrics = MetricsSnapshot(updated_at=0.5)
    candidates, fail_open = healthy_candidates([scraped, never], 1.0, Staleness(2.0))
    assert list(candidates) == [scraped] and not fail_open


def test_the_detector_has_its_own_threshold() -> None:
    clock = ManualClock(start=100.0)
    store = Datastore()
    store.set_pool(
        PoolSpec("pool", "ns", parse_selector("app=vllm"), (8000,)),
        [PodInfo("p0", "ns", "10.0.0.1", labels={"app": "vllm"}, ready=True)],
    )
    (state,) = store.endpoints()
    state.metrics = MetricsSnapshot(updated_at=99.7)  # idle, 300 ms old
    detector = UtilizationDetector(clock=clock)
    assert detector.utilization(state, clock.now()) == 1.0  # stale to the detector's 200 ms: saturated
    assert not Staleness(2.0).is_stale(state.metrics, clock.now())  # fresh to the flag's default
