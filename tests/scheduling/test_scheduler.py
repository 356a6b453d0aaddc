"""Profile runner (filters → clamped weighted scores → picker) and the scheduler loop."""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence

import pytest
from scheduling_builders import names, request, state

from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import (
    CycleState,
    ProfileResult,
    SchedulerProfileView,
    SchedulingResult,
    ScoredEndpoint,
)
from epp.plugins.pickers import MaxScorePicker
from epp.plugins.single_profile import SingleProfileHandler
from epp.scheduling.profile import NO_ENDPOINTS, ProfileError, SchedulerProfile, WeightedScorer
from epp.scheduling.recorder import QUIET, CycleMetrics
from epp.scheduling.scheduler import Scheduler
from epp.telemetry.metrics import EppMetrics


class FixedScorer:
    def __init__(self, name: str, scores: Sequence[float]) -> None:
        self.typed_name = TypedName("fixed-scorer", name)
        self.scores = list(scores)
        self.calls = 0

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        self.calls += 1
        return self.scores[: len(candidates)]


class KeepFilter:
    def __init__(self, keep: set[str]) -> None:
        self.typed_name = TypedName("keep-filter", "keep")
        self.keep = keep

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        return [c for c in candidates if c.endpoint.pod_name in self.keep]


class RecordingPicker:
    def __init__(self) -> None:
        self.typed_name = TypedName("recording-picker", "rec")
        self.seen: list[tuple[str, float]] = []

    def pick(self, cycle: CycleState, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> ProfileResult:
        self.seen = [(s.state.endpoint.pod_name, s.score) for s in scored]
        return ProfileResult([scored[0].state] if scored else [])


STATES = [state(0), state(1), state(2), state(3)]


def test_scores_are_clamped_then_weighted() -> None:
    picker = RecordingPicker()
    profile = SchedulerProfile(
        "p",
        scorers=[
            WeightedScorer(FixedScorer("a", [-1.0, 0.5, 2.0, math.nan]), 2.0),
            WeightedScorer(FixedScorer("b", [1, 1, 0, 0.25]), 1.0),
        ],
        picker=picker,
    )
    profile.run(CycleState(), request(), STATES, QUIET)
    assert picker.seen == [("pod-0", 1.0), ("pod-1", 2.0), ("pod-2", 2.0), ("pod-3", 0.25)]


def test_filters_run_in_order_and_an_empty_set_fails_the_profile() -> None:
    scorer = FixedScorer("a", [1, 1, 1, 1])
    picker = RecordingPicker()
    profile = SchedulerProfile(
        "p",
        filters=[KeepFilter({"pod-1", "pod-2"}), KeepFilter({"pod-2", "pod-3"})],
        scorers=[WeightedScorer(scorer)],
        picker=picker,
    )
    assert names(profile.run(CycleState(), request(), STATES, QUIET).targets) == ["pod-2"]
    assert picker.seen == [("pod-2", 1.0)]

    empty = SchedulerProfile(
        "p", filters=[KeepFilter(set()), KeepFilter({"pod-1"})], scorers=[WeightedScorer(scorer)], picker=picker
    )
    with pytest.raises(ProfileError, match=NO_ENDPOINTS):
        empty.run(CycleState(), request(), STATES, QUIET)
    assert scorer.calls == 1  # nothing after the emptying filter ran
    with pytest.raises(ProfileError, match=NO_ENDPOINTS):
        SchedulerProfile("p", picker=picker).run(CycleState(), request(), [], QUIET)


def test_a_picker_choosing_nothing_fails_the_profile_and_weights_are_not_negative() -> None:
    # A plugin that breaks its contract is contained instead: tests/scheduling/test_plugin_failures.py.
    class EmptyPicker(RecordingPicker):
        def pick(self, cycle: CycleState, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> ProfileResult:
            return ProfileResult([])

    with pytest.raises(ProfileError, match=r"picker rec/recording-picker returned no endpoints"):
        SchedulerProfile("p", picker=EmptyPicker()).run(CycleState(), request(), STATES, QUIET)
    with pytest.raises(ValueError, match="weight must be >= 0"):
        WeightedScorer(FixedScorer("neg", []), -1.0)


def test_plugin_durations_are_recorded() -> None:
    metrics = EppMetrics()
    profile = SchedulerProfile(
        "p",
        filters=[KeepFilter({"pod-0"})],
        scorers=[WeightedScorer(FixedScorer("a", [1, 1, 1, 1]))],
        picker=RecordingPicker(),
        metrics=metrics,
    )
    profile.run(CycleState(), request(), STATES, CycleMetrics(metrics))
    profile.run(CycleState(), request(), STATES, CycleMetrics(metrics))
    profile.run(CycleState(), request(), STATES, QUIET)  # Explain's kind: nothing observed
    count = "inference_extension_plugin_duration_seconds_count"
    get = metrics.registry.get_sample_value
    assert get(count, {"extension_point": "Filter", "plugin_type": "keep-filter", "plugin_name": "keep"}) == 2
    assert get(count, {"extension_point": "Scorer", "plugin_type": "fixed-scorer", "plugin_name": "a"}) == 2
    assert get(count, {"extension_point": "Picker", "plugin_type": "recording-picker", "plugin_name": "rec"}) == 2


def default_like_scheduler(metrics: EppMetrics | None = None, *, filters: Sequence[KeepFilter] = ()) -> Scheduler:
    profile = SchedulerProfile(
        "default",
        filters=filters,
        scorers=[WeightedScorer(FixedScorer("a", [0.1, 0.9, 0.5, 0.2]), 2.0)],
        picker=MaxScorePicker(rng=random.Random(0)),
        metrics=metrics,
    )
    return Scheduler(profile_handler=SingleProfileHandler(), profiles={"default": profile}, metrics=metrics)


def test_schedule_success_records_metrics() -> None:
    metrics = EppMetrics()
    scheduler = default_like_scheduler(metrics)
    result = scheduler.schedule(request("m", target="m-v2"), STATES)
    assert result.primary_profile == "default"
    assert names(result.primary.targets) == ["pod-1"]
    get = metrics.registry.get_sample_value
    assert get("inference_extension_scheduler_e2e_duration_seconds_count") == 1
    labels = {
        "status": "success",
        "target_model_name": "m-v2",
        "pod_name": "pod-1",
        "namespace": "default",
        "port": "8000",
    }
    assert get("inference_extension_scheduler_attempts_total", labels) == 1
    handler = {"plugin_type": "single-profile-handler", "plugin_name": "single-profile-handler"}
    count = "inference_extension_plugin_duration_seconds_count"
    assert get(count, {"extension_point": "ProfilePicker", **handler}) == 2  # once to run, once to stop
    assert get(count, {"extension_point": "ProcessProfilesResults", **handler}) == 1


def test_schedule_failure_is_resource_exhausted() -> None:
    metrics = EppMetrics()
    scheduler = default_like_scheduler(metrics, filters=[KeepFilter(set())])
    with pytest.raises(EppError) as err:
        scheduler.schedule(request("m"), STATES)
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert (
        err.value.msg
        == "failed to find target endpoint: profile 'default': no endpoints available for the given request"
    )
    get = metrics.registry.get_sample_value
    labels = {"status": "failure", "target_model_name": "m", "pod_name": "", "namespace": "", "port": ""}
    assert get("inference_extension_scheduler_attempts_total", labels) == 1
    assert get("inference_extension_scheduler_e2e_duration_seconds_count") == 1


class ScriptedHandler:
    """Runs the given rounds of profile names, then names ``primary``."""

    def __init__(self, rounds: list[list[str]], primary: str) -> None:
        self.typed_name = TypedName("scripted-handler", "h")
        self.rounds = rounds
        self.primary = primary

    def pick_profiles(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        profiles: Mapping[str, SchedulerProfileView],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        return self.rounds.pop(0) if self.rounds else []

    def process_results(
        self, cycle: CycleState, request: InferenceRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        return SchedulingResult(dict(results), self.primary)


def two_profiles() -> dict[str, SchedulerProfile]:
    ok = SchedulerProfile("ok", picker=RecordingPicker())
    failing = SchedulerProfile("failing", filters=[KeepFilter(set())], picker=RecordingPicker())
    return {"ok": ok, "failing": failing}


def test_multi_profile_primary_decides() -> None:
    ok = Scheduler(profile_handler=ScriptedHandler([["ok"], ["failing"]], "ok"), profiles=two_profiles())
    result = ok.schedule(request(), STATES)
    assert result.profile_results["failing"] is None
    assert names(result.primary.targets) == ["pod-0"]

    bad = Scheduler(profile_handler=ScriptedHandler([["ok", "failing"]], "failing"), profiles=two_profiles())
    with pytest.raises(EppError, match=r"profile 'failing': no endpoints available"):
        bad.schedule(request(), STATES)


@pytest.mark.parametrize(
    ("rounds", "message"),
    [
        ([], r"failed to run any scheduler profile for request req-1"),
        ([["nope"]], r"picked unknown profile 'nope'"),
        ([["ok"]] * 100, r"did not finish within 64 rounds"),
    ],
)
def test_handler_misbehaviour_fails_cleanly(rounds: list[list[str]], message: str) -> None:
    scheduler = Scheduler(profile_handler=ScriptedHandler(list(rounds), "ok"), profiles=two_profiles())
    with pytest.raises(EppError, match=message) as err:
        scheduler.schedule(request(), STATES)
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
