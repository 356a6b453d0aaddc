"""What a run of the request pipeline leaves behind: a served request's effects, or Explain's record of them.

The pipeline decides; the recorder it is given acts. Every point where routing touches the world
goes through it: a model-rewrite decision counted, a fail-open counted, the conformance hooks'
round-robin turn taken, the request admitted (which may mean waiting in the flow-control queue), a
data producer, admission plugin or PreRequest plugin timed, a disaggregation handler's decision
counted, the request counted in flight on its target, and the scheduling cycle's steps
(:class:`~epp.scheduling.recorder.CycleRecorder`).

- :class:`ServingRecorder`, one per pool, shared by its requests and holding no per-request state,
  applies the effects: what every ext_proc request gets;
- :class:`ExplainRecorder`, one per Explain call, applies none of them and keeps each step in an
  :class:`~epp.requestcontrol.explain.Explanation` instead.

So Explain runs the code a request runs, and the hot path pays for no dry-run branch.
:class:`RequestControlSeries` declares what the serving recorder counts itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Protocol

from epp.framework.disaggregation import Decision
from epp.framework.endpoint import EndpointState
from epp.framework.latency import LatencyPredictions
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.framework.scheduling import CycleState, InFlightEstimator, PreRequest, SchedulingResult
from epp.requestcontrol.admission import AdmissionStage
from epp.requestcontrol.conformance import RoundRobin
from epp.requestcontrol.disagg_series import DisaggSeries
from epp.requestcontrol.explain import Explanation
from epp.requestcontrol.in_flight import count_in
from epp.scheduling.plugin_errors import EXCEPTION
from epp.scheduling.recorder import CycleMetrics, CycleRecorder, Observe
from epp.scheduling.trace import SchedulingTrace
from epp.telemetry.families import Names
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter

__all__ = ["ExplainRecorder", "Recorder", "RequestControlSeries", "ServingRecorder", "TimedPreRequest"]


TimedPreRequest = tuple[PreRequest, Observe]
"""A PreRequest plugin and its duration histogram child."""


class RequestControlSeries:
    """Upstream's model-rewrite decisions, and our count of fail-open schedulings per pool."""

    def __init__(self, metrics: EppMetrics) -> None:
        self.rewrites = metrics.families.counter(
            Names(
                "inference_extension_model_rewrite_decisions_total",
                "llm_d_epp_model_rewrite_decisions_total",
                "Total number of model rewrite decisions.",
                "Total number of inference model rewrite decisions.",
                labels=("model_rewrite_name", "model_name", "target_model"),
            )
        )
        self.fail_open = Counter(
            "epp_endpoint_health_fail_open_total",
            "Requests scheduled over every candidate because none was routable (all unreachable or ejected).",
            ("name",),
            registry=metrics.registry,
        )


class Recorder(Protocol):
    @property
    def cycle(self) -> CycleRecorder:
        """The recorder of the scheduling cycle."""
        ...

    def rewritten(self, rewrite: str, model: str, target: str) -> None:
        """InferenceModelRewrite ``rewrite`` sent ``model`` to ``target``."""
        ...

    def failed_open(self) -> None:
        """No candidate was routable: every candidate was handed to scheduling."""
        ...

    def take_turn(self, turns: RoundRobin, selected: Sequence[EndpointState]) -> EndpointState:
        """The conformance hooks' pick among ``selected`` (non-empty)."""
        ...

    async def admit(
        self, stage: AdmissionStage, request: InferenceRequest, candidates: Callable[[], Sequence[EndpointState]]
    ) -> Sequence[EndpointState]:
        """The endpoints to schedule on once ``stage`` admits ``request``; raises its EppError when refused."""
        ...

    def timed(self, observe: Observe, seconds: float) -> None:
        """A data producer or an admission plugin ran for ``seconds``."""
        ...

    def produced(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        """The data producers are done with ``request`` (its attributes hold what they made)."""
        ...

    def pre_request(
        self, plugins: Sequence[TimedPreRequest], cycle: CycleState, request: InferenceRequest, result: SchedulingResult
    ) -> None:
        """The decision is made: PreRequest plugins learn it."""
        ...

    def disaggregated(self, request: InferenceRequest, decision: Decision) -> None:
        """A disaggregation handler decided which stages ``request`` goes through."""
        ...

    def routed(self, request: InferenceRequest, decision: RoutingDecision, estimator: InFlightEstimator) -> None:
        """``request`` goes to ``decision``'s first target."""
        ...


class ServingRecorder:
    """The effects of a served request; one per pool."""

    __slots__ = ("_cycle", "_disagg", "_fail_open", "_metrics", "_rewrites", "errors")

    def __init__(self, metrics: EppMetrics, pool_name: str) -> None:
        series = metrics.series(RequestControlSeries)
        self._rewrites = series.rewrites
        self._cycle = CycleMetrics(metrics)
        self._fail_open = series.fail_open.labels(pool_name)
        self._metrics = metrics
        self._disagg: DisaggSeries | None = None  # declared at the first disaggregated request
        self.errors = self._cycle.errors
        """Where plugin failures outside the scheduling cycle are counted (PostResponse)."""

    @property
    def cycle(self) -> CycleRecorder:
        return self._cycle

    def rewritten(self, rewrite: str, model: str, target: str) -> None:
        self._rewrites.labels(rewrite, model, target).inc()

    def failed_open(self) -> None:
        self._fail_open.inc()

    def take_turn(self, turns: RoundRobin, selected: Sequence[EndpointState]) -> EndpointState:
        return turns.pick(selected)

    async def admit(
        self, stage: AdmissionStage, request: InferenceRequest, candidates: Callable[[], Sequence[EndpointState]]
    ) -> Sequence[EndpointState]:
        return await stage.admit(request, candidates, self._cycle.plugin_failed)

    def timed(self, observe: Observe, seconds: float) -> None:
        observe(seconds)

    def produced(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        return None

    def pre_request(
        self, plugins: Sequence[TimedPreRequest], cycle: CycleState, request: InferenceRequest, result: SchedulingResult
    ) -> None:
        errors = self.errors
        for plugin, observe in plugins:
            start = time.perf_counter()
            try:
                plugin.pre_request(cycle, request, result)
            except Exception as exc:  # a plugin bug must not fail a request that already has a target
                errors.failed("PreRequest", plugin.typed_name, EXCEPTION, f"{type(exc).__name__}: {exc}", exc)
            elapsed = time.perf_counter() - start
            observe(elapsed)
            errors.timed("PreRequest", plugin.typed_name, elapsed)

    def disaggregated(self, request: InferenceRequest, decision: Decision) -> None:
        if self._disagg is None:
            self._disagg = self._metrics.series(DisaggSeries)
        self._disagg.count(decision, request.target_model)

    def routed(self, request: InferenceRequest, decision: RoutingDecision, estimator: InFlightEstimator) -> None:
        count_in(request, decision.targets[0], estimator)


class ExplainRecorder:
    """Explain's recorder: every step kept in :attr:`explanation`, no effect applied."""

    __slots__ = ("explanation",)

    def __init__(self, request: InferenceRequest) -> None:
        self.explanation = Explanation(request)

    @property
    def cycle(self) -> SchedulingTrace:
        return self.explanation.scheduling

    def rewritten(self, rewrite: str, model: str, target: str) -> None:
        return None

    def failed_open(self) -> None:
        return None

    def take_turn(self, turns: RoundRobin, selected: Sequence[EndpointState]) -> EndpointState:
        return turns.peek(selected)

    async def admit(
        self, stage: AdmissionStage, request: InferenceRequest, candidates: Callable[[], Sequence[EndpointState]]
    ) -> Sequence[EndpointState]:
        endpoints = candidates()
        explanation = self.explanation
        explanation.admission, refusal = stage.verdict(request, endpoints, explanation.scheduling.plugin_failed)
        if refusal is not None:
            explanation.admission_reason = refusal.msg
            raise refusal
        return endpoints

    def timed(self, observe: Observe, seconds: float) -> None:
        return None

    def produced(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        explanation = self.explanation
        explanation.candidates = candidates
        explanation.latency = [v for v in request.attributes.values() if isinstance(v, LatencyPredictions)]

    def pre_request(
        self, plugins: Sequence[TimedPreRequest], cycle: CycleState, request: InferenceRequest, result: SchedulingResult
    ) -> None:
        return None

    def disaggregated(self, request: InferenceRequest, decision: Decision) -> None:
        self.explanation.disaggregation = decision

    def routed(self, request: InferenceRequest, decision: RoutingDecision, estimator: InFlightEstimator) -> None:
        explanation = self.explanation
        explanation.picked = decision.targets
        explanation.destination = decision.destination
        explanation.upstream_headers = dict(decision.upstream_headers)
