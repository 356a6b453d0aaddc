"""What a dry-run scheduling cycle saw, step by step: Explain's cycle recorder and the record it answers from.

A cycle given a :class:`SchedulingTrace` (instead of the serving :class:`~epp.scheduling.recorder.CycleMetrics`)
runs the same code as a real one; the trace keeps each profile's filter results, every scorer's raw
scores and weighted contributions and the pick, and the plugins that broke their contract (neither
counted nor logged), and observes no duration. The request-level steps
around the cycle are the request pipeline's (``requestcontrol.recorder``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.scheduling.plugin_errors import Reason
from epp.scheduling.recorder import Observe, accumulate

__all__ = ["FilterStep", "PluginFailure", "ProfileTrace", "SchedulingTrace", "ScorerStep"]


@dataclass(slots=True)
class FilterStep:
    """One filter and the endpoints it kept."""

    plugin: TypedName
    kept: Sequence[EndpointState]


@dataclass(slots=True)
class ScorerStep:
    """One scorer, its weight, what it returned for each endpoint that passed the filters, and
    what that added to each endpoint's total (clamped to [0, 1], times the weight)."""

    plugin: TypedName
    weight: float
    raw: Sequence[float]
    weighted: Sequence[float]


@dataclass(slots=True)
class ProfileTrace:
    """One run of one profile; ``error`` says why it produced no endpoint."""

    name: str
    picker: TypedName | None = None
    filters: list[FilterStep] = field(default_factory=list)
    endpoints: Sequence[EndpointState] = ()
    """The endpoints that passed the filters, in the order the scorers saw them."""
    scorers: list[ScorerStep] = field(default_factory=list)
    totals: Sequence[float] = ()
    """Each endpoint's weighted sum, as the picker received it."""
    targets: Sequence[EndpointState] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class PluginFailure:
    """A plugin that broke its contract during the dry run (the run went on by its extension point's rule)."""

    extension_point: str
    plugin: TypedName
    reason: Reason
    detail: str


@dataclass(slots=True)
class SchedulingTrace:
    """Every profile run of one cycle, in order, the primary profile the handler named, and the plugins that failed."""

    profiles: list[ProfileTrace] = field(default_factory=list)
    primary_profile: str = ""
    failures: list[PluginFailure] = field(default_factory=list)

    @property
    def _current(self) -> ProfileTrace:
        return self.profiles[-1]

    def profile_started(self, name: str) -> None:
        """A new profile run (a handler may run a profile more than once; each run is kept)."""
        self.profiles.append(ProfileTrace(name))

    def filtered(self, plugin: TypedName, observe: Observe, kept: Sequence[EndpointState], seconds: float) -> None:
        self._current.filters.append(FilterStep(plugin, kept))

    def scored(
        self,
        plugin: TypedName,
        observe: Observe,
        weight: float,
        scores: Sequence[float],
        seconds: float,
    ) -> None:
        weighted = [0.0] * len(scores)
        accumulate(weighted, scores, weight)
        self._current.scorers.append(ScorerStep(plugin, weight, scores, weighted))

    def picked(
        self,
        plugin: TypedName,
        observe: Observe,
        endpoints: Sequence[EndpointState],
        totals: Sequence[float],
        targets: Sequence[EndpointState],
        seconds: float,
    ) -> None:
        profile = self._current
        profile.endpoints, profile.picker, profile.totals, profile.targets = endpoints, plugin, totals, targets

    def profile_failed(self, name: str, reason: str) -> None:
        self._current.error = reason

    def plugin_failed(
        self, extension_point: str, plugin: TypedName, reason: Reason, detail: str, error: BaseException | None
    ) -> None:
        self.failures.append(PluginFailure(extension_point, plugin, reason, detail))

    def handler_ran(self, observe: Observe, seconds: float) -> None:
        return None

    def cycle_ended(
        self, request: InferenceRequest, primary_profile: str, target: EndpointState | None, seconds: float
    ) -> None:
        self.primary_profile = primary_profile
