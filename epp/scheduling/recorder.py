"""What a scheduling cycle tells about itself, and the two listeners: serving's metrics and Explain's trace.

The cycle calls one method of its :class:`CycleRecorder` per step (each filter, scorer and pick, each
profile handler call, the end of the cycle). :class:`CycleMetrics`, the recorder every served
request gets, turns a step into one histogram observation and the end into upstream's scheduler
series; :class:`~epp.scheduling.trace.SchedulingTrace`, Explain's, keeps each step for the answer
and observes nothing. That is the whole difference between a real cycle and a dry one: the runner
has no flag and no branch for it.

:class:`SchedulingSeries` declares the series: upstream's scheduler and plugin-duration ones.
``accumulate`` is the one place where a scorer's raw scores become its weighted contribution. A plugin
that breaks its contract is told with ``plugin_failed`` (counted and logged by the serving recorder,
``plugin_errors``; kept in Explain's answer); the serving recorder also counts a call that held the loop
too long (``slow``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.scheduling.plugin_errors import PluginErrors, Reason
from epp.telemetry.families import Names
from epp.telemetry.metrics import EppMetrics

__all__ = [
    "QUIET",
    "CycleMetrics",
    "CycleRecorder",
    "Observe",
    "QuietCycle",
    "SchedulingSeries",
    "accumulate",
    "discard",
]

_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)

log = logging.getLogger(__name__)

Observe = Callable[[float], None]
"""Records one duration in seconds (a plugin's histogram child)."""


def discard(_: float) -> None:
    """The observer of a plugin nobody times (a scheduler built without metrics)."""
    return None


def accumulate(totals: list[float], scores: Sequence[float], weight: float) -> bool:
    """Add each score, clamped to [0, 1] (NaN and negatives add nothing), times ``weight`` to ``totals``;
    False when a score had to be clamped (it was above 1, negative or NaN)."""
    in_range = True
    for i, score in enumerate(scores):
        if score > 0.0:
            if score < 1.0:
                totals[i] += score * weight
            else:
                totals[i] += weight
                in_range = in_range and score == 1.0
        elif score != 0.0:  # negative, or NaN
            in_range = False
    return in_range


class SchedulingSeries:
    """Upstream's scheduler series and the duration of every plugin call (requestcontrol's plugins too)."""

    def __init__(self, metrics: EppMetrics) -> None:
        f = metrics.families
        self.e2e = f.histogram(
            Names(
                "inference_extension_scheduler_e2e_duration_seconds",
                "llm_d_epp_scheduler_e2e_duration_seconds",
                "Scheduling latency distribution in seconds.",
                "End-to-end scheduling latency distribution in seconds.",
            ),
            _BUCKETS,
        )
        self.attempts = f.counter(
            Names(
                "inference_extension_scheduler_attempts_total",
                "llm_d_epp_scheduler_attempts_total",
                "Total number of scheduling attempts.",
                labels=("status", "target_model_name", "endpoint_name", "namespace", "port"),
                gie_labels=("status", "target_model_name", "pod_name", "namespace", "port"),
                renamed={"pod_name": "endpoint_name"},
            )
        )
        self.plugin_duration = f.histogram(  # values: extension point, plugin type, plugin name
            Names(
                "inference_extension_plugin_duration_seconds",
                "llm_d_epp_plugin_duration_seconds",
                "Plugin processing latency distribution in seconds for each extension point, plugin type and name.",
                "Plugin processing latency distribution in seconds for each extension point, plugin type and "
                "plugin name.",
                labels=("extension_point", "plugin_type", "plugin_name"),
            ),
            _BUCKETS,
        )


class CycleRecorder(Protocol):
    """The steps of one scheduling cycle, in order; ``observe`` is the step's plugin timer."""

    def profile_started(self, name: str) -> None: ...

    def filtered(self, plugin: TypedName, observe: Observe, kept: Sequence[EndpointState], seconds: float) -> None: ...

    def scored(
        self,
        plugin: TypedName,
        observe: Observe,
        weight: float,
        scores: Sequence[float],
        seconds: float,
    ) -> None: ...

    def picked(
        self,
        plugin: TypedName,
        observe: Observe,
        endpoints: Sequence[EndpointState],
        totals: Sequence[float],
        targets: Sequence[EndpointState],
        seconds: float,
    ) -> None: ...

    def profile_failed(self, name: str, reason: str) -> None: ...

    def plugin_failed(
        self, extension_point: str, plugin: TypedName, reason: Reason, detail: str, error: BaseException | None
    ) -> None:
        """A plugin broke its contract (``plugin_errors.REASONS``); the caller went on by its extension point's rule."""
        ...

    def handler_ran(self, observe: Observe, seconds: float) -> None:
        """The profile handler picked profiles or combined their results."""
        ...

    def cycle_ended(
        self, request: InferenceRequest, primary_profile: str, target: EndpointState | None, seconds: float
    ) -> None:
        """The cycle is over: ``target`` is the primary profile's first pick, None when it failed."""
        ...


class CycleMetrics:
    """The serving recorder: plugin durations and upstream's ``scheduler_e2e`` / ``scheduler_attempts`` series."""

    __slots__ = ("_attempts", "_e2e", "errors")

    def __init__(self, metrics: EppMetrics) -> None:
        series = metrics.series(SchedulingSeries)
        self._e2e = series.e2e
        self._attempts = series.attempts
        self.errors = metrics.series(PluginErrors)

    def profile_started(self, name: str) -> None:
        return None

    def filtered(self, plugin: TypedName, observe: Observe, kept: Sequence[EndpointState], seconds: float) -> None:
        observe(seconds)
        self.errors.timed("Filter", plugin, seconds)

    def scored(
        self,
        plugin: TypedName,
        observe: Observe,
        weight: float,
        scores: Sequence[float],
        seconds: float,
    ) -> None:
        observe(seconds)
        self.errors.timed("Scorer", plugin, seconds)

    def picked(
        self,
        plugin: TypedName,
        observe: Observe,
        endpoints: Sequence[EndpointState],
        totals: Sequence[float],
        targets: Sequence[EndpointState],
        seconds: float,
    ) -> None:
        observe(seconds)
        self.errors.timed("Picker", plugin, seconds)

    def profile_failed(self, name: str, reason: str) -> None:
        return None

    def plugin_failed(
        self, extension_point: str, plugin: TypedName, reason: Reason, detail: str, error: BaseException | None
    ) -> None:
        self.errors.failed(extension_point, plugin, reason, detail, error)

    def handler_ran(self, observe: Observe, seconds: float) -> None:
        observe(seconds)

    def cycle_ended(
        self, request: InferenceRequest, primary_profile: str, target: EndpointState | None, seconds: float
    ) -> None:
        self._e2e.observe(seconds)
        if target is None:
            self._attempts.labels("failure", request.target_model, "", "", "").inc()
        else:
            ep = target.endpoint
            self._attempts.labels("success", request.target_model, ep.pod_name, ep.namespace, str(ep.port)).inc()


class QuietCycle:
    """A recorder that keeps nothing (a plugin failure is only logged): a scheduler built without metrics,
    asked without a recorder."""

    __slots__ = ()

    def profile_started(self, name: str) -> None:
        return None

    def filtered(self, plugin: TypedName, observe: Observe, kept: Sequence[EndpointState], seconds: float) -> None:
        return None

    def scored(
        self, plugin: TypedName, observe: Observe, weight: float, scores: Sequence[float], seconds: float
    ) -> None:
        return None

    def picked(
        self,
        plugin: TypedName,
        observe: Observe,
        endpoints: Sequence[EndpointState],
        totals: Sequence[float],
        targets: Sequence[EndpointState],
        seconds: float,
    ) -> None:
        return None

    def profile_failed(self, name: str, reason: str) -> None:
        return None

    def plugin_failed(
        self, extension_point: str, plugin: TypedName, reason: Reason, detail: str, error: BaseException | None
    ) -> None:
        log.warning(
            "plugin failed",
            extra={"extension_point": extension_point, "plugin": str(plugin), "reason": reason, "detail": detail},
        )

    def handler_ran(self, observe: Observe, seconds: float) -> None:
        return None

    def cycle_ended(
        self, request: InferenceRequest, primary_profile: str, target: EndpointState | None, seconds: float
    ) -> None:
        return None


QUIET = QuietCycle()
