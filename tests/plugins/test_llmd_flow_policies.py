"""The llm-d router's flow-control policies: soft-reflective-ceiling-policy and program-aware-fairness."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pytest

from epp.clock import ManualClock
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.response import CompletedResponse, Usage
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.plugins import program_aware_fairness, soft_reflective_ceiling


def test_soft_reflective_ceilings_open_close_and_alternate() -> None:
    policy = soft_reflective_ceiling.create("p", {}, PluginContext())
    assert policy.ceilings(0.9, [5]) == [1.0]  # one band: always open
    assert policy.ceilings(0.2, [2, 1, 0]) == [1.0, 1.0, 1.0]  # every band below its reflection
    assert policy.tick == 0  # nothing alternates: the tick does not move
    assert policy.ceilings(1.0, [2, 1, 0]) == [1.0, 0.0, 0.0]  # saturated: all but the top band closed
    # 0.75: band 1 reflects at 0.625, band 2 at 0.25; period round(0.75 / 0.25) = 3.
    pattern = [policy.ceilings(0.75, [2, 1, 0]) for _ in range(6)]
    assert pattern == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0], [1.0, 1.0, 1.0]] * 2
    # 0.55 in three bands: band 1 (0.725) still open, band 2 (0.45) alternating with period round(1.22) = 1.
    assert policy.ceilings(0.55, [2, 1, 0]) == [1.0, 1.0, 1.0]
    policy.tick = 0  # two bands at 0.9: period round(0.9 / 0.1) = 9, open once in nine cycles
    assert [policy.ceilings(0.9, [1, 0])[1] for _ in range(9)] == [0.0] * 8 + [1.0]
    with pytest.raises(PluginConfigError, match="unknown field"):
        soft_reflective_ceiling.create("p", {"threshold": 0.5}, PluginContext())


@dataclass
class Queued:
    enqueued_at: float
    seq: int = 0
    ttl: float = 0.0
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass
class Flow:
    fairness_id: str
    enqueued_at: float
    count: int = 1

    def head_key(self) -> tuple[float, ...]:
        return (self.enqueued_at,)

    def head(self) -> Queued:
        return Queued(self.enqueued_at)


def _served(
    policy: program_aware_fairness.ProgramAwareFairness, program: str, rid: str, *, prompt: int, out: int
) -> None:
    request = InferenceRequest(request_id=rid, headers={"x-llm-d-inference-fairness-id": program}, queue_wait=0.25)
    policy.pre_request(CycleState(), request, SchedulingResult({}, ""))
    policy.response_complete(request, CompletedResponse(Usage(prompt_tokens=prompt, completion_tokens=out)))
    policy.post_response(request, None)


def test_program_aware_serves_the_least_served_program_and_service_decays() -> None:
    clock = ManualClock()
    policy = program_aware_fairness.create("paf", {"lasHalfLifeSeconds": 10}, PluginContext(clock=clock))
    now = clock.now()
    flows = [Flow("heavy", now - 1.0), Flow("light", now - 0.5)]
    assert policy.pick(flows, None) is flows[0]  # equal service: the older head wins
    _served(policy, "heavy", "r1", prompt=1000, out=500)  # 1000 + 2 × 500 = 2000
    _served(policy, "light", "r2", prompt=10, out=5)
    assert policy.programs["heavy"].service == pytest.approx(2000)
    assert policy.pick(flows, None) is flows[1]  # the least attained service wins despite its younger head
    clock.advance(10)
    assert policy.programs["heavy"].in_flight == 0
    _served(policy, "light", "r3", prompt=0, out=0)  # reading a program folds its decay in
    assert policy.programs["light"].service == pytest.approx(10.0)  # 20 halved once
    stats = policy.programs["heavy"]
    assert stats.dispatched == 1 and stats.average_wait_ms == 250
    assert policy.pick([Flow("heavy", clock.now())], None).fairness_id == "heavy"  # type: ignore[union-attr]
    assert policy.programs["heavy"].service == pytest.approx(1000)


def test_program_aware_in_flight_is_released_however_the_request_ends_and_idle_programs_expire() -> None:
    clock = ManualClock()
    params = {"evictionTtlSeconds": 60, "evictionSweepSeconds": 5}
    policy = program_aware_fairness.create("paf", params, PluginContext(clock=clock))
    abandoned = InferenceRequest(request_id="gone", headers={"x-gateway-inference-fairness-id": "p"})
    policy.pre_request(CycleState(), abandoned, SchedulingResult({}, ""))
    assert policy.programs["p"].in_flight == 1
    clock.advance(120)
    policy.pick([Flow("other", clock.now())], None)
    assert "p" in policy.programs  # in flight: never expired
    policy.post_response(abandoned, None)  # the stream ended without a complete response
    policy.post_response(abandoned, None)  # told twice: counted once
    assert policy.programs["p"].in_flight == 0
    clock.advance(6)
    policy.pick([Flow("other", clock.now())], None)
    assert "p" not in policy.programs and "other" in policy.programs


def test_program_aware_state_survives_a_reload_and_parameters_are_checked() -> None:
    clock = ManualClock()
    old = program_aware_fairness.create("paf", {}, PluginContext(clock=clock))
    _served(old, "a", "r1", prompt=5, out=0)
    new = program_aware_fairness.create("paf", {}, PluginContext(clock=clock))
    new.inherit(old)
    assert new.programs is old.programs and new.programs["a"].service == 5
    with pytest.raises(PluginConfigError, match="strategy"):
        program_aware_fairness.create("paf", {"strategy": "drf"}, PluginContext())
    with pytest.raises(PluginConfigError, match="evictionSweepSeconds"):
        program_aware_fairness.create("paf", {"evictionSweepSeconds": 0}, PluginContext())
    with pytest.raises(PluginConfigError, match="lasWeightService"):
        program_aware_fairness.create("paf", {"lasWeightService": -1}, PluginContext())
