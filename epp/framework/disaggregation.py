"""Disaggregated serving as the scheduler sees it: deciders, their verdicts, and what a handler decided.

A disaggregation profile handler (``disagg-profile-handler``) runs the decode profile, then asks a
*decider* whether an encode and a prefill stage pay for this request (llm-d router
``profilehandler/disagg``). A decider answers with a :class:`Verdict` that carries its numbers
(prompt tokens, tokens the decode pod already holds, the thresholds), so ``Explain`` can show why,
and the handler hands the whole :class:`Decision` to the request pipeline on the
:class:`~epp.framework.scheduling.SchedulingResult`; the pipeline gives it to its recorder (served
requests count it in ``llm_d_epp_disagg_decision_total``, Explain keeps it).

What a decider reads of the decode pod's cache is a :class:`PrefixMatch`: every
``prefix-cache-scorer`` that scores a candidate publishes one in the cycle (:func:`publish_match`),
from the precise index when it has one, else from the approximate index, so the decider sees
what the decode profile's own scoring saw.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.framework.roles import Stage

if TYPE_CHECKING:
    from epp.framework.scheduling import CycleState

__all__ = [
    "DECODE_ONLY",
    "ENCODE_DECODE",
    "ENCODE_PREFILL_DECODE",
    "PEER_ENDPOINT",
    "PREFILL_DECODE",
    "Decider",
    "Decision",
    "PrefixMatch",
    "StageOutcome",
    "Verdict",
    "decision_type",
    "prefix_match",
    "publish_match",
]

DECODE_ONLY = "decode-only"
PREFILL_DECODE = "prefill-decode"
ENCODE_DECODE = "encode-decode"
ENCODE_PREFILL_DECODE = "encode-prefill-decode"

PEER_ENDPOINT = "peer-endpoint"
"""Cycle-state key: the endpoint an earlier stage picked (the decode pick before prefill, or the
prefill pick before decode in ``prefill-first`` order), for plugins of the later profile
(topology affinity) to compare their candidates with."""

_PREFIX_MATCHES = "prefix-cache-match"
_Published = tuple[Sequence[EndpointState], Mapping[str, int], int, int]


def decision_type(*, encode: bool, prefill: bool) -> str:
    """Upstream's ``decision_type`` label for the stages that ran."""
    if encode:
        return ENCODE_PREFILL_DECODE if prefill else ENCODE_DECODE
    return PREFILL_DECODE if prefill else DECODE_ONLY


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """How much of the prompt one endpoint holds: leading blocks, their size, and the prompt's blocks."""

    cached_blocks: int
    total_blocks: int
    block_size_tokens: int

    @property
    def cached_tokens(self) -> int:
        return self.cached_blocks * self.block_size_tokens


def publish_match(
    cycle: CycleState,
    candidates: Sequence[EndpointState],
    matches: Mapping[str, int],
    total_blocks: int,
    block_size_tokens: int,
) -> None:
    """Record what a prefix-cache scorer found for ``candidates`` this cycle: leading blocks held per
    endpoint key (absent: none). Kept as given, so scoring pays one append; :func:`prefix_match` reads it."""
    published: list[_Published] | None = cycle.get(_PREFIX_MATCHES)
    entry = (candidates, matches, total_blocks, block_size_tokens)
    if published is None:
        cycle[_PREFIX_MATCHES] = [entry]
    else:
        published.append(entry)


def prefix_match(cycle: CycleState, endpoint: EndpointState) -> PrefixMatch | None:
    """What this cycle's prefix-cache scoring found for ``endpoint`` (the largest count wins); None when
    nothing scored it."""
    published: list[_Published] | None = cycle.get(_PREFIX_MATCHES)
    best: PrefixMatch | None = None
    for candidates, matches, total, block in published or ():
        if any(c is endpoint for c in candidates):
            match = PrefixMatch(matches.get(endpoint.endpoint.key, 0), total, block)
            if best is None or match.cached_tokens > best.cached_tokens:
                best = match
    return best


@dataclass(frozen=True, slots=True)
class Verdict:
    """A decider's answer: run the stage or not, why, and the numbers it compared."""

    disaggregate: bool
    reason: str
    numbers: Mapping[str, float] = field(default_factory=dict)


@runtime_checkable
class Decider(Protocol):
    """Whether a disaggregated stage pays for this request (upstream's ``deciderPlugin``).

    ``endpoint`` is the decode pick (None in ``prefill-first`` order, where decode has not run).
    Pure: no effect beyond the answer, since Explain asks the same question.
    """

    @property
    def typed_name(self) -> TypedName: ...

    def decide(self, cycle: CycleState, request: InferenceRequest, endpoint: EndpointState | None) -> Verdict: ...


@dataclass(frozen=True, slots=True)
class StageOutcome:
    """One stage of one request: its profile, whether it ran, who decided and why."""

    stage: Stage
    profile: str
    ran: bool
    reason: str
    decider: TypedName | None = None
    verdict: Verdict | None = None
    targets: Sequence[EndpointState] = ()


@dataclass(frozen=True, slots=True)
class Decision:
    """What a disaggregation handler decided for one request.

    ``metric`` names the counter family it is counted in: ``disagg`` (``disagg_decision_total``)
    or ``pd`` (the deprecated ``pd-profile-handler``'s ``pd_decision_total``).
    """

    handler: TypedName
    decision_type: str
    stages: tuple[StageOutcome, ...]
    metric: str = "disagg"
