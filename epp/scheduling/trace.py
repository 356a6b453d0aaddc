"""What a dry-run scheduling cycle saw, step by step: the record ``Explain`` answers from.

A scheduling cycle given a :class:`SchedulingTrace` runs the same code as a real one and, in
that mode, records each profile's filter results, every scorer's raw scores and the pick, and
records no metrics. Without a trace (every real request) the runner pays one ``is None`` check
per stage. The director adds what happens around the cycle (``requestcontrol.explain``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName

__all__ = ["FilterStep", "ProfileTrace", "SchedulingTrace", "ScorerStep"]


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


@dataclass(slots=True)
class SchedulingTrace:
    """Every profile run of one cycle, in order, and the primary profile the handler named."""

    profiles: list[ProfileTrace] = field(default_factory=list)
    primary_profile: str = ""

    def start(self, name: str) -> ProfileTrace:
        """A new profile run (a handler may run a profile more than once; each run is kept)."""
        profile = ProfileTrace(name)
        self.profiles.append(profile)
        return profile
