"""One scheduling profile: filters, then weighted scorers, then exactly one picker.

The runner enforces the plugin contracts instead of trusting them (upstream
``scheduler_profile.go``): a filter that empties the set fails the profile ("no endpoints
available for the given request"); every score is clamped to [0, 1] (NaN counts as 0) before it
is multiplied by the scorer's weight; a scorer returning the wrong number of scores, or a picker
returning nothing, fails the profile. Each plugin call is timed into
``inference_extension_plugin_duration_seconds{extension_point, plugin_type, plugin_name}``
through a histogram child resolved once at build time, so timing costs one ``observe`` per call.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, Filter, Picker, ProfileResult, ScoredEndpoint, Scorer
from epp.telemetry.metrics import EppMetrics

__all__ = [
    "NO_ENDPOINTS",
    "Observe",
    "ProfileError",
    "SchedulerProfile",
    "WeightedScorer",
    "plugin_observer",
]

NO_ENDPOINTS = "no endpoints available for the given request"

Observe = Callable[[float], None]
"""Records one duration in seconds."""


def _discard(_: float) -> None:
    return None


def plugin_observer(metrics: EppMetrics | None, extension_point: str, typed_name: TypedName) -> Observe:
    """The ``observe`` of this plugin's duration histogram child (a no-op without metrics)."""
    if metrics is None:
        return _discard
    return metrics.plugin_duration.labels(extension_point, typed_name.type, typed_name.name).observe


class ProfileError(Exception):
    """A profile produced no endpoint; the message says why (the scheduler reports it)."""


@dataclass(frozen=True, slots=True)
class WeightedScorer:
    scorer: Scorer
    weight: float = 1.0

    def __post_init__(self) -> None:
        if not self.weight >= 0:
            raise ValueError(f"scorer {self.scorer.typed_name} weight must be >= 0, got {self.weight}")


class SchedulerProfile:
    """A named filter → score → pick pipeline; immutable once built."""

    __slots__ = ("_filters", "_name", "_picker", "_scorers", "filters", "picker", "scorers")

    def __init__(
        self,
        name: str,
        *,
        filters: Sequence[Filter] = (),
        scorers: Sequence[WeightedScorer] = (),
        picker: Picker,
        metrics: EppMetrics | None = None,
    ) -> None:
        self._name = name
        self.filters = tuple(filters)
        self.scorers = tuple(scorers)
        self.picker = picker
        self._filters = tuple((f, plugin_observer(metrics, "Filter", f.typed_name)) for f in self.filters)
        self._scorers = tuple(
            (ws.scorer, ws.weight, plugin_observer(metrics, "Scorer", ws.scorer.typed_name)) for ws in self.scorers
        )
        self._picker = (picker, plugin_observer(metrics, "Picker", picker.typed_name))

    @property
    def name(self) -> str:
        return self._name

    def run(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> ProfileResult:
        """Filter, score and pick; raises :class:`ProfileError` when no endpoint comes out."""
        clock = time.perf_counter
        endpoints = candidates
        for plugin, observe in self._filters:
            start = clock()
            endpoints = plugin.filter(cycle, request, endpoints)
            observe(clock() - start)
            if not endpoints:
                raise ProfileError(NO_ENDPOINTS)
        if not endpoints:
            raise ProfileError(NO_ENDPOINTS)

        count = len(endpoints)
        totals = [0.0] * count
        for scorer, weight, observe in self._scorers:
            start = clock()
            scores = scorer.score(cycle, request, endpoints)
            observe(clock() - start)
            if len(scores) != count:
                raise ProfileError(f"scorer {scorer.typed_name} returned {len(scores)} scores for {count} endpoints")
            for i, score in enumerate(scores):
                if score > 0.0:  # negatives and NaN add nothing
                    totals[i] += weight if score >= 1.0 else score * weight

        picker, observe = self._picker
        scored = [ScoredEndpoint(e, s) for e, s in zip(endpoints, totals, strict=True)]
        start = clock()
        result = picker.pick(cycle, request, scored)
        observe(clock() - start)
        if not result.targets:
            raise ProfileError(f"picker {picker.typed_name} returned no endpoints")
        return result

    def __repr__(self) -> str:
        scorers = ", ".join(f"{ws.scorer.typed_name}: {ws.weight:g}" for ws in self.scorers)
        filters = ", ".join(str(f.typed_name) for f in self.filters)
        picker = self.picker.typed_name
        return f"SchedulerProfile({self._name!r}, filters=[{filters}], scorers=[{scorers}], picker={picker})"
