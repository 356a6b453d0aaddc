"""utilization-detector: saturation (queue, KV, staleness on an injected clock) and its filter."""

from __future__ import annotations

import pytest
from scheduling_builders import NOW, names, request, state

from epp.clock import ManualClock
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.saturation import Aggregation, SaturationDetector
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
    assert detector.aggregation is Aggregation.AVERAGE  # upstream's rule


def test_saturated_at_thresholds(detector: UtilizationDetector) -> None:
    assert detector.utilization(state(0, queue=4, kv=0.79), NOW) < 1.0
    assert detector.utilization(state(0, queue=5), NOW) == 1.0
    assert detector.utilization(state(0, kv=0.8), NOW) == 1.0


def test_stale_or_never_scraped_is_saturated(detector: UtilizationDetector, clock: ManualClock) -> None:
    fresh = state(0, updated_at=NOW)
    assert detector.utilization(fresh, clock.now()) == 0.0
    clock.advance(0.19)
    assert detector.utilization(fresh, clock.now()) == 0.0  # 190 ms old: within the 200 ms threshold
    clock.advance(0.02)
    assert detector.utilization(fresh, clock.now()) == 1.0
    assert detector.utilization(state(1, updated_at=0.0), clock.now()) == 1.0


def test_utilization(detector: UtilizationDetector) -> None:
    assert detector.utilization(state(0, queue=2, kv=0.6), NOW) == pytest.approx(0.75)
    assert detector.utilization(state(0, queue=10, kv=0.0), NOW) == pytest.approx(2.0)
    assert detector.utilization(state(0, updated_at=NOW - 1), NOW) == 1.0


def test_pool_saturation_averages_by_default(detector: UtilizationDetector) -> None:
    busy, idle, half = state(0, queue=10), state(1), state(2, queue=2, kv=0.4)  # 2.0, 0.0, 0.5
    assert detector.saturation([busy, idle], NOW) == pytest.approx(1.0)  # upstream sheds here
    assert detector.saturation([busy, idle, half], NOW) == pytest.approx(2.5 / 3)
    assert detector.saturation([idle, state(1, updated_at=NOW - 1)], NOW) == pytest.approx(0.5)  # stale = 1.0
    assert detector.saturation([], NOW) == 1.0


def test_minimum_aggregation_saturates_only_when_every_candidate_is(clock: ManualClock) -> None:
    detector = utilization_detector.create("u", {"aggregation": "minimum"}, PluginContext(clock=clock))
    assert detector.aggregation is Aggregation.MINIMUM
    busy, idle = state(0, queue=10), state(1)
    assert detector.saturation([busy, idle], NOW) == 0.0
    assert detector.saturation([busy, state(1, kv=0.85)], NOW) >= 1.0
    assert detector.saturation([busy, state(1, updated_at=NOW - 1)], NOW) == 1.0
    assert detector.saturation([], NOW) == 1.0


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
    assert detector.utilization(states[0], NOW) >= 1.0


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
        ({"aggregation": "all"}, r"aggregation: must be one of average, minimum, got 'all'"),
        ({"aggregation": 1}, r"aggregation: must be one of average, minimum, got 1"),
        ({"queueDepth": 3}, r"unknown field\(s\) \['queueDepth'\]"),
    ],
)
def test_invalid_parameters(params: dict[str, object], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        utilization_detector.create("u", params, PluginContext())
