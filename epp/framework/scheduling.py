"""Scheduling extension points (upstream's Filter / Scorer / Picker / ProfileHandler) and results.

A scheduling cycle is synchronous: it runs on the event loop between two awaits, so every
plugin sees the same metrics. Scores are aligned with the candidate list (index i scores
candidates[i]); the profile runner clamps them to [0, 1] and applies the weight, so plugins
need not be trusted to respect the range.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from epp.framework.disaggregation import Decision
from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest

__all__ = [
    "PEER_ENDPOINT",
    "CycleState",
    "EndpointsObserver",
    "Filter",
    "InFlightEstimator",
    "Picker",
    "PostResponse",
    "PreRequest",
    "ProfileHandler",
    "ProfileResult",
    "ResponseHeaderContributor",
    "SchedulerProfileView",
    "SchedulingResult",
    "ScoredEndpoint",
    "Scorer",
    "UpstreamHeaderContributor",
]


class CycleState(dict[str, Any]):
    """Scratch space for one scheduling cycle, shared by the plugins of that cycle."""


PEER_ENDPOINT = "peer-endpoint"
"""CycleState key of the :class:`EndpointState` picked in an earlier phase of the same cycle, which a
profile handler publishes before running the next profile (upstream's ``peer-endpoint`` request
attribute: ``disagg-profile-handler`` sets the decode pick before running ``prefill``). The topology
affinity plugins read it; absent, they have no peer."""


@dataclass(slots=True)
class ScoredEndpoint:
    state: EndpointState
    score: float


@dataclass(slots=True)
class ProfileResult:
    """The endpoints one profile chose, best first (more than one = fallback list)."""

    targets: list[EndpointState]
    scored: Sequence[ScoredEndpoint] = ()
    """Every candidate the profile scored, with its weighted score (set by the profile runner)."""


@dataclass(slots=True)
class SchedulingResult:
    """The profiles' results and the primary one (whose targets the request goes to).

    ``target_port``: the port the gateway sends to instead of the targets' own, 0 for theirs (the
    deprecated ``primaryPort`` of the data-parallel handlers: the rank is then named in a header).
    ``disaggregation``: what a disaggregation handler decided, None for other handlers.
    """

    profile_results: dict[str, ProfileResult | None]
    primary_profile: str
    target_port: int = 0
    disaggregation: Decision | None = None

    @property
    def primary(self) -> ProfileResult:
        result = self.profile_results.get(self.primary_profile)
        if result is None:
            raise LookupError(f"primary profile {self.primary_profile!r} produced no result")
        return result


@runtime_checkable
class Filter(Protocol):
    """Narrows the candidates (upstream's Filter); runs first, in profile order, on the event loop."""

    @property
    def typed_name(self) -> TypedName: ...

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        """Return the candidates that may serve the request (empty fails the profile)."""
        ...


@runtime_checkable
class Scorer(Protocol):
    """Scores each candidate in [0, 1] (upstream's Scorer); the profile adds the scores times the scorer's weight."""

    @property
    def typed_name(self) -> TypedName: ...

    def score(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> Sequence[float]:
        """One score per candidate, in order, nominally in [0, 1]."""
        ...


@runtime_checkable
class Picker(Protocol):
    """Chooses the target(s) from the candidates and their weighted totals (upstream's Picker)."""

    @property
    def typed_name(self) -> TypedName: ...

    def pick(self, cycle: CycleState, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> ProfileResult:
        """Choose the target(s) from the scored candidates."""
        ...


class SchedulerProfileView(Protocol):
    """What a profile handler needs to know of a profile."""

    @property
    def name(self) -> str: ...


@runtime_checkable
class ProfileHandler(Protocol):
    """Decides which profiles run, in rounds, and which result is primary (upstream's ProfileHandler)."""

    @property
    def typed_name(self) -> TypedName: ...

    def pick_profiles(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        profiles: Mapping[str, SchedulerProfileView],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        """Names of the profiles to run next; empty ends the cycle."""
        ...

    def process_results(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        results: Mapping[str, ProfileResult | None],
    ) -> SchedulingResult:
        """Combine the profile results and name the primary profile."""
        ...


@runtime_checkable
class InFlightEstimator(Protocol):
    """How many tokens a routed request adds to its endpoint's in-flight load (``inflight-load-producer``)."""

    @property
    def typed_name(self) -> TypedName: ...

    def estimate_tokens(self, request: InferenceRequest) -> int: ...


@runtime_checkable
class PreRequest(Protocol):
    """Runs after a routing decision (e.g. the prefix index learns what the chosen pod holds)."""

    @property
    def typed_name(self) -> TypedName: ...

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        """The request is routed to ``result``'s primary targets; same ``cycle`` as the scheduling cycle."""
        ...


@runtime_checkable
class PostResponse(Protocol):
    """Runs once when the response is complete (or the stream ended early)."""

    @property
    def typed_name(self) -> TypedName: ...

    def post_response(self, request: InferenceRequest, endpoint: EndpointState | None) -> None:
        """The response ended (complete or not) at ``endpoint`` (None: the request was never routed)."""
        ...


@runtime_checkable
class EndpointsObserver(Protocol):
    """Plugins that keep per-endpoint state implement this to free it when endpoints leave."""

    def endpoints_removed(self, keys: Collection[str]) -> None:
        """These endpoints (their ``Endpoint.key``) left the pool: forget what is kept for them."""
        ...


@runtime_checkable
class UpstreamHeaderContributor(Protocol):
    """Plugins that tell the model server something on the forwarded request (where to prefill).

    ``owned_upstream_headers`` are the headers the plugin owns: a copy the client sent is removed
    from the forwarded request, so only the picker's decision reaches the model server's sidecar.
    Pure (Explain shows the headers a request would get).
    """

    @property
    def owned_upstream_headers(self) -> frozenset[str]: ...

    def upstream_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]: ...


@runtime_checkable
class ResponseHeaderContributor(Protocol):
    """Plugins that hand the client something on the response (session affinity's token)."""

    def response_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]:
        """Headers to add to the response the client receives for ``request``."""
        ...
