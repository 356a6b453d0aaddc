"""A plugin that breaks its contract is contained: the rule of its extension point, a count, a log that does not flood.

Each case runs one profile with a misbehaving plugin beside well-behaved ones, on the serving recorder
(:class:`CycleMetrics`: counted in ``epp_plugin_errors_total``) and on Explain's trace (kept in the
answer, counted nowhere), and checks the request is still routed the way docs/plugins.md says.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest
from scheduling_builders import names, request, state

from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult, ScoredEndpoint
from epp.plugins.pickers import MaxScorePicker
from epp.plugins.single_profile import SingleProfileHandler
from epp.scheduling.plugin_errors import LOG_INTERVAL, SLOW_CALL, PluginErrors
from epp.scheduling.profile import SchedulerProfile, WeightedScorer
from epp.scheduling.recorder import CycleMetrics, discard
from epp.scheduling.scheduler import Scheduler
from epp.scheduling.trace import PluginFailure, SchedulingTrace
from epp.telemetry.metrics import EppMetrics

STATES = [state(0), state(1), state(2)]
ERRORS = "epp_plugin_errors_total"


class Fixed:
    """A scorer returning ``scores`` (whatever they are) or raising ``error``."""

    def __init__(self, name: str, scores: Any = (), error: Exception | None = None) -> None:
        self.typed_name = TypedName("fixed", name)
        self.scores = scores
        self.error = error

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> Any:
        if self.error is not None:
            raise self.error
        return self.scores


class Keep:
    """A filter keeping ``keep`` (pod names), returning ``result`` instead when set, or raising ``error``."""

    def __init__(self, keep: set[str], *, result: Any = None, error: Exception | None = None) -> None:
        self.typed_name = TypedName("keep", "keep")
        self.keep, self.result, self.error = keep, result, error

    def filter(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> Any:
        if self.error is not None:
            raise self.error
        if self.result is not None:
            return self.result
        return [c for c in candidates if c.endpoint.pod_name in self.keep]


class BrokenPicker:
    def __init__(self, *, result: Any = None, error: Exception | None = None) -> None:
        self.typed_name = TypedName("broken-picker", "bp")
        self.result, self.error = result, error

    def pick(self, cycle: CycleState, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> Any:
        scored = list(scored)
        scored.reverse()  # what it did before failing must not matter
        if self.error is not None:
            raise self.error
        return self.result


def run(profile: SchedulerProfile) -> tuple[list[str], EppMetrics, SchedulingTrace]:
    """Run ``profile`` once served (counted) and once as Explain does (traced); both must pick the same."""
    metrics = EppMetrics()
    served = profile.run(CycleState(), request(), STATES, CycleMetrics(metrics))
    trace = SchedulingTrace()
    trace.profile_started(profile.name)
    explained = profile.run(CycleState(), request(), STATES, trace)
    assert names(served.targets) == names(explained.targets)
    return names(served.targets), metrics, trace


def count(metrics: EppMetrics, point: str, plugin: TypedName, reason: str) -> float | None:
    labels = {"extension_point": point, "plugin_type": plugin.type, "plugin_name": plugin.name, "reason": reason}
    return metrics.registry.get_sample_value(ERRORS, labels)


class ByPod:
    """A well-behaved scorer: pod-1 best, then pod-2, then pod-0."""

    typed_name = TypedName("by-pod", "good")
    SCORES = {"pod-0": 0.1, "pod-1": 0.9, "pod-2": 0.5}

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        return [self.SCORES[c.endpoint.pod_name] for c in candidates]


GOOD = ByPod()


def scorers(bad: Fixed) -> list[WeightedScorer]:
    return [WeightedScorer(GOOD, 1.0), WeightedScorer(bad, 5.0)]


@pytest.mark.parametrize(
    ("bad", "reason", "detail"),
    [
        (Fixed("bad", error=RuntimeError("boom")), "exception", "RuntimeError: boom"),
        (Fixed("bad", [1.0]), "malformed", "returned 1 scores for 3 endpoints"),
        (Fixed("bad", None), "malformed", "returned NoneType None, not a sequence of numbers"),
        (Fixed("bad", [1.0, None, 1.0]), "malformed", "returned list [1.0, None, 1.0], not a sequence of numbers"),
    ],
)
def test_a_failing_scorer_adds_nothing(bad: Fixed, reason: str, detail: str) -> None:
    # Weighted 5, the bad scorer would win every pick if any of its scores were added (pod-0 or pod-2).
    picked, metrics, trace = run(
        SchedulerProfile("p", scorers=scorers(bad), picker=MaxScorePicker(rng=random.Random(1)))
    )
    assert picked == ["pod-1"]  # the good scorer's choice
    assert count(metrics, "Scorer", bad.typed_name, reason) == 1
    assert trace.failures == [PluginFailure("Scorer", bad.typed_name, reason, detail)]  # type: ignore[arg-type]
    (step,) = [s for s in trace.profiles[0].scorers if s.plugin == bad.typed_name]
    assert all(math.isnan(r) for r in step.raw) and step.weighted == [0.0, 0.0, 0.0]  # Explain: "nan -> 0"


def test_scores_outside_the_range_are_clamped_and_counted() -> None:
    bad = Fixed("bad", [-3.0, 7.0, math.nan])
    picked, metrics, trace = run(
        SchedulerProfile("p", scorers=scorers(bad), picker=MaxScorePicker(rng=random.Random(1)))
    )
    assert picked == ["pod-1"]  # 7 counts as 1: 0.9 + 5 beats 0.1 + 0 and 0.5 + 0
    assert count(metrics, "Scorer", bad.typed_name, "out_of_range") == 1
    assert trace.failures[0].detail == "returned scores outside [0, 1], clamped: [-3.0, 7.0, nan]"
    in_range = Fixed("fine", [0.0, 1.0, 0.5])
    _, metrics, trace = run(
        SchedulerProfile("p", scorers=scorers(in_range), picker=MaxScorePicker(rng=random.Random(1)))
    )
    assert trace.failures == [] and count(metrics, "Scorer", in_range.typed_name, "out_of_range") is None


@pytest.mark.parametrize(
    ("bad", "reason"), [(Keep(set(), error=KeyError("zone")), "exception"), (Keep(set(), result=42), "malformed")]
)
def test_a_failing_filter_is_skipped(bad: Keep, reason: str) -> None:
    profile = SchedulerProfile(
        "p",
        filters=[bad, Keep({"pod-0", "pod-2"})],
        scorers=[WeightedScorer(GOOD)],
        picker=MaxScorePicker(rng=random.Random(1)),
    )
    picked, metrics, trace = run(profile)
    assert picked == ["pod-2"]  # the next filter still ran on every candidate
    assert count(metrics, "Filter", bad.typed_name, reason) == 1
    assert [f.plugin for f in trace.profiles[0].filters] == [bad.typed_name, TypedName("keep", "keep")]


@pytest.mark.parametrize(
    ("picker", "reason"),
    [(BrokenPicker(error=IndexError("oops")), "exception"), (BrokenPicker(result=["pod-0"]), "malformed")],
)
def test_a_failing_picker_is_replaced_by_the_best_total(picker: BrokenPicker, reason: str) -> None:
    picked, metrics, trace = run(SchedulerProfile("p", scorers=[WeightedScorer(GOOD)], picker=picker))  # type: ignore[arg-type]
    assert picked == ["pod-1"]
    assert count(metrics, "Picker", picker.typed_name, reason) == 1
    assert trace.failures[0].extension_point == "Picker"


class RaisingHandler(SingleProfileHandler):
    """The single-profile handler, raising in one of its two steps."""

    def __init__(self, step: str) -> None:
        super().__init__()
        self.step = step

    def pick_profiles(self, *args: Any) -> list[str]:
        if self.step == "pick":
            raise ValueError("no profile for you")
        return super().pick_profiles(*args)

    def process_results(self, *args: Any) -> SchedulingResult:
        if self.step == "process":
            raise ValueError("cannot combine")
        return super().process_results(*args)


@pytest.mark.parametrize(("step", "point"), [("pick", "ProfilePicker"), ("process", "ProcessProfilesResults")])
def test_a_failing_profile_handler_answers_500_naming_it(step: str, point: str) -> None:
    metrics = EppMetrics()
    handler = RaisingHandler(step)
    profile = SchedulerProfile("default", scorers=[WeightedScorer(GOOD)], picker=MaxScorePicker(rng=random.Random(1)))
    scheduler = Scheduler(profile_handler=handler, profiles={"default": profile}, metrics=metrics)
    with pytest.raises(EppError) as err:
        scheduler.schedule(request(), STATES)
    assert err.value.code is ErrorCode.INTERNAL
    assert err.value.msg.startswith("profile handler single-profile-handler/single-profile-handler failed: ValueError")
    assert count(metrics, point, handler.typed_name, "exception") == 1


def test_slow_calls_count_above_the_threshold() -> None:
    metrics = EppMetrics()
    recorder = CycleMetrics(metrics)
    recorder.scored(GOOD.typed_name, discard, 1.0, [0.5], SLOW_CALL / 2)
    assert count(metrics, "Scorer", GOOD.typed_name, "slow") is None
    recorder.scored(GOOD.typed_name, discard, 1.0, [0.5], SLOW_CALL * 3)
    recorder.filtered(TypedName("keep", "keep"), discard, STATES, SLOW_CALL * 3)
    assert count(metrics, "Scorer", GOOD.typed_name, "slow") == 1
    assert count(metrics, "Filter", TypedName("keep", "keep"), "slow") == 1


def test_a_plugin_failing_on_every_request_logs_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    errors = PluginErrors(EppMetrics(), clock=lambda: now[0])
    plugin = TypedName("fixed", "bad")
    with caplog.at_level(logging.DEBUG, logger="epp.scheduling.plugin_errors"):
        for _ in range(5):
            errors.failed("Scorer", plugin, "exception", "boom", RuntimeError("boom"))
        now[0] = LOG_INTERVAL + 1
        errors.failed("Scorer", plugin, "exception", "boom", None)
        errors.failed("Scorer", plugin, "malformed", "short", None)  # another reason has its own budget
    levels = [(r.levelname, getattr(r, "reason", ""), getattr(r, "since_last_log", None)) for r in caplog.records]
    assert levels == [
        ("ERROR", "exception", 0),
        *[("DEBUG", "exception", None)] * 4,
        ("ERROR", "exception", 4),
        ("ERROR", "malformed", 0),
    ]
    assert caplog.records[0].exc_info is not None  # the first one carries the traceback
