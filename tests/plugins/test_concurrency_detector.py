"""concurrency-detector: in-flight counts from PreRequest/PostResponse, saturation, filter, parameters."""

from __future__ import annotations

import pytest
from scheduling_builders import request, state

from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins.concurrency_detector import ConcurrencyDetector, create


def routed(detector: ConcurrencyDetector, index: int) -> None:
    result = SchedulingResult(profile_results={"p": ProfileResult(targets=[state(index)])}, primary_profile="p")
    detector.pre_request(CycleState(), request(), result)


def test_saturation_is_inflight_over_capacity_and_follows_the_request_life() -> None:
    detector = create("c", {"maxConcurrency": 2}, PluginContext())
    pool = [state(1), state(2)]
    assert detector.saturation(pool, 0.0) == 0.0
    assert detector.saturation([], 0.0) == 1.0
    for _ in range(3):
        routed(detector, 1)
    assert detector.inflight(pool[0].endpoint.key) == 3
    assert detector.saturation(pool, 0.0) == 0.75
    assert detector.filter(CycleState(), request(), pool) == [pool[1]]  # pod 1 is past 2, no fail-open
    routed(detector, 2)
    routed(detector, 2)
    assert detector.filter(CycleState(), request(), pool) == []
    detector.post_response(request(), pool[0])
    detector.post_response(request(), None)  # routing failed: nothing was counted
    assert detector.saturation(pool, 0.0) == 1.0


def test_headroom_and_parameters() -> None:
    detector = create("c", {"maxConcurrency": 1, "headroom": 1.0}, PluginContext())
    routed(detector, 1)
    pod = [state(1)]
    assert detector.filter(CycleState(), request(), pod) == pod  # 1 in flight < 1 × (1 + 1)
    routed(detector, 1)
    assert detector.filter(CycleState(), request(), pod) == []
    with pytest.raises(PluginConfigError, match="concurrencyMode: 'tokens' is not implemented"):
        create("c", {"concurrencyMode": "tokens"}, PluginContext())
    with pytest.raises(PluginConfigError, match="maxConcurrency"):
        create("c", {"maxConcurrency": 0}, PluginContext())
