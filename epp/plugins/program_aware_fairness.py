"""program-aware-fairness: a flow-control fairness policy that serves the program that has had the least.

The llm-d router's ``flowcontrol/fairness/program-aware`` with its only strategy, ``las`` (least
attained service). A program is a fairness id (``x-llm-d-inference-fairness-id``, else an
``agent-identity`` session, else ``default-flow``: ``InferenceRequest.flow``): one flow of a band.
Choosing the flow to dispatch from, each non-empty flow scores
``lasWeightService × (1 − norm(service)) + lasWeightHeadWait × norm(head wait)``, both min-max
normalised over the band's flows (0.5 when all are equal); the highest wins (ties: the first in
fairness-id order, where upstream's is random). A program's attained service is
``prompt tokens + 2 × completion tokens`` of its completed responses, decaying with a half-life of
``lasHalfLifeSeconds`` (0: never), applied lazily whenever it is read or added to. The head wait is
how long (whole milliseconds) the flow's next item has been queued.

The plugin is also a PreRequest plugin (a dispatched request counts in flight, and its queue wait
feeds the program's running mean), a ResponseStreaming plugin (a complete response adds its
tokens) and a PostResponse plugin (the request leaves the in-flight count however it ended; upstream
only decrements on a complete response, so an abandoned one keeps its program forever). Programs
with nothing in flight and no completion for ``evictionTtlSeconds`` (3600; 0: never) are forgotten,
checked at most every ``evictionSweepSeconds`` (300) when the policy is next used (no background
task). The state outlives a configuration reload (the new instance takes the old one's), as the
flow controller keeps the policy it started with. Upstream's three gauges
(``llm_d_epp_program_aware_*``) are not exported yet: :meth:`ProgramAwareFairness.programs` holds
their values.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epp.clock import Clock
from epp.framework.endpoint import EndpointState
from epp.framework.flowcontrol import FlowView
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.response import CompletedResponse
from epp.framework.scheduling import CycleState, SchedulingResult

__all__ = ["TYPE", "Program", "ProgramAwareFairness", "create"]

TYPE = "program-aware-fairness"
_INPUT_WEIGHT, _OUTPUT_WEIGHT = 1, 2


@dataclass(slots=True)
class Program:
    """One program's accounts: attained service (decayed up to ``anchor``), waits, in-flight, last completion."""

    last_completion: float
    service: float = 0.0
    anchor: float | None = None
    waits: int = 0
    average_wait_ms: float = 0.0
    dispatched: int = 0
    in_flight: int = 0


class _State:
    """What outlives a reload: every program's accounts and which requests are in flight for which program."""

    __slots__ = ("in_flight", "next_sweep", "programs")

    def __init__(self) -> None:
        self.programs: dict[str, Program] = {}
        self.in_flight: dict[str, str] = {}
        """Request id → program, from PreRequest until the request is over."""
        self.next_sweep = 0.0


class ProgramAwareFairness(NamedPlugin):
    __slots__ = ("_clock", "_state", "eviction_ttl", "half_life", "sweep_every", "weight_service", "weight_wait")
    plugin_type = TYPE
    kinds = frozenset(
        {PluginKind.FAIRNESS_POLICY, PluginKind.PRE_REQUEST, PluginKind.RESPONSE_STREAMING, PluginKind.POST_RESPONSE}
    )

    def __init__(
        self,
        name: str = TYPE,
        *,
        clock: Clock,
        weight_service: float = 0.8,
        weight_wait: float = 0.2,
        half_life: float = 60.0,
        eviction_ttl: float = 3600.0,
        sweep_every: float = 300.0,
    ) -> None:
        super().__init__(name)
        self._clock = clock
        self.weight_service = weight_service
        self.weight_wait = weight_wait
        self.half_life = half_life
        self.eviction_ttl = eviction_ttl
        self.sweep_every = sweep_every
        self._state = _State()
        self._state.next_sweep = clock.now() + sweep_every

    @property
    def programs(self) -> Mapping[str, Program]:
        """Every program tracked now (decay is applied when a program's service is next read)."""
        return self._state.programs

    def inherit(self, previous: Plugin) -> None:
        if isinstance(previous, ProgramAwareFairness):
            self._state = previous._state

    # -- fairness ------------------------------------------------------------------------------

    def pick(self, flows: Sequence[FlowView], last: str | None) -> FlowView | None:
        now = self._clock.now()
        self._sweep(now)
        entries = [
            (
                flow,
                self._service(self._program(flow.fairness_id, now), now),
                math.floor((now - flow.head().enqueued_at) * 1000),
            )
            for flow in flows
            if flow.count
        ]
        if not entries:
            return None
        services = [service for _, service, _ in entries]
        waits = [wait for _, _, wait in entries]
        low_s, high_s, low_w, high_w = min(services), max(services), min(waits), max(waits)
        best, best_score = None, -math.inf
        for flow, service, wait in entries:
            score = self.weight_service * (1.0 - _normalised(service, low_s, high_s)) + self.weight_wait * _normalised(
                wait, low_w, high_w
            )
            if score > best_score:
                best, best_score = flow, score
        return best

    # -- the request's life ----------------------------------------------------------------------

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        now = self._clock.now()
        name = _program_of(request)
        program = self._program(name, now)
        program.in_flight += 1
        program.dispatched += 1
        self._state.in_flight[request.request_id] = name
        if request.queue_wait is not None:
            program.waits += 1
            program.average_wait_ms += (math.floor(request.queue_wait * 1000) - program.average_wait_ms) / program.waits

    def response_complete(self, request: InferenceRequest, response: CompletedResponse) -> None:
        now = self._clock.now()
        program = self._program(_program_of(request), now)
        usage = response.usage
        cost = _INPUT_WEIGHT * usage.prompt_tokens + _OUTPUT_WEIGHT * usage.completion_tokens
        program.service = self._service(program, now) + cost
        program.last_completion = now

    def post_response(self, request: InferenceRequest, endpoint: EndpointState | None) -> None:
        name = self._state.in_flight.pop(request.request_id, None)
        program = self._state.programs.get(name) if name is not None else None
        if program is not None and program.in_flight > 0:
            program.in_flight -= 1

    # -- accounts --------------------------------------------------------------------------------

    def _program(self, name: str, now: float) -> Program:
        program = self._state.programs.get(name)
        if program is None:  # seeded so a program seen but never completing still expires
            program = self._state.programs[name] = Program(last_completion=now)
        return program

    def _service(self, program: Program, now: float) -> float:
        """The program's attained service with the decay up to ``now`` folded in."""
        if program.anchor is not None and self.half_life > 0 and now > program.anchor:
            program.service *= 2.0 ** (-(now - program.anchor) / self.half_life)
        program.anchor = now
        return program.service

    def _sweep(self, now: float) -> None:
        state = self._state
        if now < state.next_sweep:
            return
        state.next_sweep = now + self.sweep_every
        if self.eviction_ttl <= 0:
            return
        idle = [
            name
            for name, program in state.programs.items()
            if not program.in_flight and now - program.last_completion > self.eviction_ttl
        ]
        for name in idle:
            del state.programs[name]


def _program_of(request: InferenceRequest) -> str:
    return request.flow()


def _normalised(value: float, low: float, high: float) -> float:
    return 0.5 if high == low else (value - low) / (high - low)


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> ProgramAwareFairness:
    p = Params(TYPE, params)
    p.choice("strategy", "las", ("las",))
    weight_service = p.number("lasWeightService", 0.8, minimum=0.0)
    weight_wait = p.number("lasWeightHeadWait", 0.2, minimum=0.0)
    half_life = p.number("lasHalfLifeSeconds", 60.0, minimum=0.0)
    ttl = p.number("evictionTtlSeconds", 3600.0, minimum=0.0)
    sweep = p.number("evictionSweepSeconds", 300.0, minimum=0.0, exclusive_minimum=True)
    p.done()
    return ProgramAwareFairness(
        name,
        clock=context.clock,
        weight_service=weight_service,
        weight_wait=weight_wait,
        half_life=half_life,
        eviction_ttl=ttl,
        sweep_every=sweep,
    )
