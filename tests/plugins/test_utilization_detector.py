"""utilization-detector: saturation (queue, KV, staleness on an injected clock) and its filter."""

from __future__ import annotations

import pytest
from scheduling_builders import NOW, names, request, state

from epp.clock import ManualClock
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.saturation import SaturationDetector
from epp.framework.scheduling import CycleState, Filter
from epp.plugins import utilization_detector
from epp.plugins.utilization_detector import UtilizationDetector


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start=NOW)


@pytest.fixture
def detector(clock: ManualClock) -> UtilizationDetector:
    return utilization_detector.create("u", {}, PluginContext(clock=clock))


def test_defaults_and_protocols(detector: UtilizationDetector) -> None:
    assert isinstance(detector, SaturationDetector) and isinstance(detector, Filter)
    t = detector.thresholds
    assert (t.queue_depth, t.kv_cache_util, t.staleness_seconds, t.headroom) == (5, 0.8, 0.2, 0.0)


def test_saturated_at_thresholds(detector: UtilizationDetector) -> None:
    assert not detector.is_saturated(state(0, queue=4, kv=0.79), NOW)
    assert detector.is_saturated(state(0, queue=5), NOW)
    assert detector.is_saturated(state(0, kv=0.8), NOW)


def test_stale_or_never_scraped_is_saturated(detector: UtilizationDetector, clock: ManualClock) -> None:
    fresh = state(0, updated_at=NOW)
    assert not detector.is_saturated(fresh, clock.now())
    clock.advance(0.19)
    assert not detector.is_saturated(fresh, clock.now())  # 190 ms old: within the 200 ms threshold
    clock.advance(0.02)
    assert detector.is_saturated(fresh, clock.now())
    assert detector.is_saturated(state(1, updated_at=0.0), clock.now())


def test_utilization(detector: UtilizationDetector) -> None:
    assert detector.utilization(state(0, queue=2, kv=0.6), NOW) == pytest.approx(0.75)
    assert detector.utilization(state(0, queue=10, kv=0.0), NOW) == pytest.approx(2.0)
    assert detector.utilization(state(0, updated_at=NOW - 1), NOW) == 1.0


def test_all_saturated(detector: UtilizationDetector) -> None:
    busy = state(0, queue=9)
    idle = state(1)
    assert detector.all_saturated([busy], NOW)
    assert not detector.all_saturated([busy, idle], NOW)
    assert detector.all_saturated([], NOW)


def test_filter_keeps_fresh_endpoints_with_room(detector: UtilizationDetector, clock: ManualClock) -> None:
    states = [state(0, queue=5), state(1, queue=4, kv=0.5), state(2, kv=0.8), state(3, updated_at=NOW - 1)]
    assert names(detector.filter(CycleState(), request(), states)) == ["pod-1"]


def test_filter_fails_open(detector: UtilizationDetector) -> None:
    states = [state(0, queue=50), state(1, kv=0.99)]
    assert names(detector.filter(CycleState(), request(), states)) == ["pod-0", "pod-1"]


def test_headroom_relaxes_the_filter_but_not_saturation(clock: ManualClock) -> None:
    detector = utilization_detector.create("u", {"headroom": 0.5}, PluginContext(clock=clock))
    states = [state(0, queue=7, kv=0.9), state(1, queue=8)]
    assert names(detector.filter(CycleState(), request(), states)) == ["pod-0"]  # 7 < 7.5, 0.9 < 1.2
    assert detector.is_saturated(states[0], NOW)


def test_parameters(clock: ManualClock) -> None:
    d = utilization_detector.create(
        "u",
        {"queueDepthThreshold": 10, "kvCacheUtilThreshold": 0.9, "metricsStalenessThreshold": "1.5s", "headroom": 0.1},
        PluginContext(clock=clock),
    )
    t = d.thresholds
    assert (t.queue_depth, t.kv_cache_util, t.staleness_seconds, t.headroom) == (10, 0.9, 1.5, 0.1)
    numeric = utilization_detector.create("u", {"metricsStalenessThreshold": 0.05}, PluginContext(clock=clock))
    assert numeric.thresholds.staleness_seconds == 0.05


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"queueDepthThreshold": 0}, r"queueDepthThreshold: must be >= 1, got 0"),
        ({"kvCacheUtilThreshold": 1.5}, r"kvCacheUtilThreshold: must be <= 1.0, got 1.5"),
        ({"kvCacheUtilThreshold": 0}, r"kvCacheUtilThreshold: must be > 0.0, got 0"),
        ({"metricsStalenessThreshold": "soon"}, r"metricsStalenessThreshold: must be a duration .*'soon'"),
        ({"metricsStalenessThreshold": "0s"}, r"metricsStalenessThreshold: must be > 0, got '0s'"),
        ({"headroom": -1}, r"headroom: must be >= 0.0, got -1"),
        ({"queueDepth": 3}, r"unknown field\(s\) \['queueDepth'\]"),
    ],
)
def test_invalid_parameters(params: dict[str, object], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        utilization_detector.create("u", params, PluginContext())
