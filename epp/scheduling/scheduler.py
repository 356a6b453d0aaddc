"""The scheduler: ask the profile handler which profiles to run, run them, combine the results.

``Scheduler.schedule`` is synchronous and runs on the event loop between two awaits, so every
plugin of a cycle sees the same metrics snapshots. It fails with ``ResourceExhausted`` (429)
"failed to find target endpoint: ..." when no profile ran or the primary profile failed, and with
500 naming the profile handler when the handler raises (counted, as every plugin failure). Each step
and the cycle's end go to the :class:`~epp.scheduling.recorder.CycleRecorder` it is given: for a
served request that records ``inference_extension_scheduler_e2e_duration_seconds`` and
``inference_extension_scheduler_attempts_total``; for ``Explain``, the steps.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileHandler, ProfileResult, SchedulingResult
from epp.scheduling.plugin_errors import EXCEPTION
from epp.scheduling.profile import ProfileError, SchedulerProfile, plugin_observer
from epp.scheduling.recorder import QUIET, CycleMetrics, CycleRecorder
from epp.telemetry.metrics import EppMetrics

__all__ = ["Scheduler"]

# A profile handler that keeps asking for profiles would otherwise spin the event loop forever.
_MAX_ROUNDS = 64


class Scheduler:
    """Profiles run under one profile handler; immutable once built."""

    __slots__ = ("_handler", "_pick_observe", "_process_observe", "_recorder", "profiles")

    def __init__(
        self,
        *,
        profile_handler: ProfileHandler,
        profiles: Mapping[str, SchedulerProfile],
        metrics: EppMetrics | None = None,
    ) -> None:
        if not profiles:
            raise ValueError("a scheduler needs at least one profile")
        self._handler = profile_handler
        self.profiles: Mapping[str, SchedulerProfile] = MappingProxyType(dict(profiles))
        self._recorder: CycleRecorder = QUIET if metrics is None else CycleMetrics(metrics)
        self._pick_observe = plugin_observer(metrics, "ProfilePicker", profile_handler.typed_name)
        self._process_observe = plugin_observer(metrics, "ProcessProfilesResults", profile_handler.typed_name)

    @property
    def profile_handler(self) -> ProfileHandler:
        return self._handler

    def observed(self, metrics: EppMetrics) -> Scheduler:
        """The same scheduler recording into ``metrics``: its cycles by default, every plugin call's duration.

        A configuration is loaded without metrics (loading publishes nothing); the pipeline that puts it
        in force makes this one, so a refused configuration never adds a series.
        """
        profiles = {name: profile.observed(metrics) for name, profile in self.profiles.items()}
        return Scheduler(profile_handler=self._handler, profiles=profiles, metrics=metrics)

    def schedule(
        self,
        request: InferenceRequest,
        candidates: Sequence[EndpointState],
        cycle: CycleState | None = None,
        recorder: CycleRecorder | None = None,
    ) -> SchedulingResult:
        """Pick the target endpoint(s), telling ``recorder`` (by default the scheduler's own: its metrics)
        every step; raises ``EppError(RESOURCE_EXHAUSTED)`` when none is found."""
        if cycle is None:
            cycle = CycleState()
        if recorder is None:
            recorder = self._recorder
        clock = time.perf_counter
        started = clock()
        target: EndpointState | None = None
        primary = ""
        try:
            result, failures = self._run(cycle, request, candidates, recorder)
            primary = result.primary_profile
            chosen = result.profile_results.get(primary)
            if chosen is None or not chosen.targets:
                raise _failed(f"profile {primary!r}: {failures.get(primary, 'produced no result')}")
            target = chosen.targets[0]
            return result
        finally:
            recorder.cycle_ended(request, primary, target, clock() - started)

    def _run(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        candidates: Sequence[EndpointState],
        recorder: CycleRecorder,
    ) -> tuple[SchedulingResult, dict[str, str]]:
        """The handler's combined result, and why each failed profile failed."""
        clock = time.perf_counter
        handler = self._handler
        profiles = self.profiles
        results: dict[str, ProfileResult | None] = {}
        failures: dict[str, str] = {}
        for _ in range(_MAX_ROUNDS):
            start = clock()
            try:
                names = handler.pick_profiles(cycle, request, profiles, results)
            except Exception as exc:
                raise _handler_failed(handler, "ProfilePicker", exc, recorder) from exc
            recorder.handler_ran(self._pick_observe, clock() - start)
            if not names:
                break
            for name in names:
                profile = profiles.get(name)
                if profile is None:
                    raise _failed(f"profile handler {handler.typed_name} picked unknown profile {name!r}")
                recorder.profile_started(name)
                try:
                    results[name] = profile.run(cycle, request, candidates, recorder)
                    failures.pop(name, None)
                except ProfileError as exc:
                    results[name] = None
                    failures[name] = str(exc)
                    recorder.profile_failed(name, str(exc))
        else:
            raise _failed(f"profile handler {handler.typed_name} did not finish within {_MAX_ROUNDS} rounds")

        if not results:
            raise _failed(f"failed to run any scheduler profile for request {request.request_id}")
        start = clock()
        try:
            result = handler.process_results(cycle, request, results)
        except Exception as exc:
            raise _handler_failed(handler, "ProcessProfilesResults", exc, recorder) from exc
        recorder.handler_ran(self._process_observe, clock() - start)
        return result, failures

    def __repr__(self) -> str:
        return f"Scheduler(handler={self._handler.typed_name}, profiles={list(self.profiles.values())!r})"


def _handler_failed(handler: ProfileHandler, step: str, exc: Exception, recorder: CycleRecorder) -> EppError:
    """A profile handler that raises: told to the recorder; the request gets 500 naming it (nothing to route by)."""
    detail = f"{type(exc).__name__}: {exc}"
    recorder.plugin_failed(step, handler.typed_name, EXCEPTION, detail, exc)
    return EppError(ErrorCode.INTERNAL, f"profile handler {handler.typed_name} failed: {detail}")


def _failed(reason: str) -> EppError:
    return EppError(ErrorCode.RESOURCE_EXHAUSTED, f"failed to find target endpoint: {reason}")
