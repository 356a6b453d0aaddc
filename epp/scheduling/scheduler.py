"""The scheduler: ask the profile handler which profiles to run, run them, combine the results.

``Scheduler.schedule`` is synchronous and runs on the event loop between two awaits, so every
plugin of a cycle sees the same metrics snapshots. It fails with ``ResourceExhausted`` (429)
"failed to find target endpoint: ..." when no profile ran or the primary profile failed, and
records ``inference_extension_scheduler_e2e_duration_seconds`` and
``inference_extension_scheduler_attempts_total`` for every call, except a dry run (given a
:class:`~epp.scheduling.trace.SchedulingTrace`, for ``Explain``), which records its steps there
and no metric.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import MappingProxyType

from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileHandler, ProfileResult, SchedulingResult
from epp.scheduling.profile import ProfileError, SchedulerProfile, plugin_observer
from epp.scheduling.trace import SchedulingTrace
from epp.telemetry.metrics import EppMetrics

__all__ = ["Scheduler"]

# A profile handler that keeps asking for profiles would otherwise spin the event loop forever.
_MAX_ROUNDS = 64


class Scheduler:
    """Profiles run under one profile handler; immutable once built."""

    __slots__ = ("_handler", "_metrics", "_pick_observe", "_process_observe", "profiles")

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
        self._metrics = metrics
        self._pick_observe = plugin_observer(metrics, "ProfilePicker", profile_handler.typed_name)
        self._process_observe = plugin_observer(metrics, "ProcessProfilesResults", profile_handler.typed_name)

    @property
    def profile_handler(self) -> ProfileHandler:
        return self._handler

    def schedule(
        self,
        request: InferenceRequest,
        candidates: Sequence[EndpointState],
        *,
        cycle: CycleState | None = None,
        trace: SchedulingTrace | None = None,
    ) -> SchedulingResult:
        """Pick the target endpoint(s); raises ``EppError(RESOURCE_EXHAUSTED)`` when none is found.

        With ``trace`` (a dry run) the steps are recorded there and no metric is.
        """
        clock = time.perf_counter
        started = clock()
        target: EndpointState | None = None
        try:
            result = self._run(cycle if cycle is not None else CycleState(), request, candidates, trace)
            target = result.primary.targets[0]
            return result
        finally:
            metrics = self._metrics
            if metrics is not None and trace is None:
                metrics.scheduler_e2e.observe(clock() - started)
                _record_attempt(metrics, request, target)

    def _run(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        candidates: Sequence[EndpointState],
        trace: SchedulingTrace | None,
    ) -> SchedulingResult:
        clock = time.perf_counter
        handler = self._handler
        profiles = self.profiles
        results: dict[str, ProfileResult | None] = {}
        failures: dict[str, str] = {}
        for _ in range(_MAX_ROUNDS):
            start = clock()
            names = handler.pick_profiles(cycle, request, profiles, results)
            if trace is None:
                self._pick_observe(clock() - start)
            if not names:
                break
            for name in names:
                profile = profiles.get(name)
                if profile is None:
                    raise _failed(f"profile handler {handler.typed_name} picked unknown profile {name!r}")
                profile_trace = None if trace is None else trace.start(name)
                try:
                    results[name] = profile.run(cycle, request, candidates, profile_trace)
                    failures.pop(name, None)
                except ProfileError as exc:
                    results[name] = None
                    failures[name] = str(exc)
                    if profile_trace is not None:
                        profile_trace.error = str(exc)
        else:
            raise _failed(f"profile handler {handler.typed_name} did not finish within {_MAX_ROUNDS} rounds")

        if not results:
            raise _failed(f"failed to run any scheduler profile for request {request.request_id}")
        start = clock()
        result = handler.process_results(cycle, request, results)
        if trace is None:
            self._process_observe(clock() - start)
        else:
            trace.primary_profile = result.primary_profile
        primary = result.profile_results.get(result.primary_profile)
        if primary is None or not primary.targets:
            reason = failures.get(result.primary_profile, "produced no result")
            raise _failed(f"profile {result.primary_profile!r}: {reason}")
        return result

    def __repr__(self) -> str:
        return f"Scheduler(handler={self._handler.typed_name}, profiles={list(self.profiles.values())!r})"


def _record_attempt(metrics: EppMetrics, request: InferenceRequest, target: EndpointState | None) -> None:
    attempts = metrics.scheduler_attempts
    if target is None:
        attempts.labels("failure", request.target_model, "", "", "").inc()
    else:
        ep = target.endpoint
        attempts.labels("success", request.target_model, ep.pod_name, ep.namespace, str(ep.port)).inc()


def _failed(reason: str) -> EppError:
    return EppError(ErrorCode.RESOURCE_EXHAUSTED, f"failed to find target endpoint: {reason}")
