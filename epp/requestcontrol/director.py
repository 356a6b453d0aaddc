"""The pool director: everything between a parsed request and the endpoint Envoy should route to.

The ext_proc stream only carries the request (headers, parsed body); this is the one place that
resolves what the request *means*: target model, objective and priority. ``route`` (body
requests), in order (upstream ``requestcontrol/director.go``, plus v0.3's
InferenceModel path for ``v1alpha2`` pools):

1. target model: header ``x-llm-d-model-name-rewrite`` (or ``x-gateway-…``), else the client's model; then the
   InferenceModelRewrite for the client's model (oldest exact rule, else oldest generic rule);
   then, for a v1alpha2 pool, the InferenceModel whose ``modelName`` is that name (unknown →
   404; ``targetModels`` weighted split; criticality → priority Critical 1, Standard 0,
   Sheddable -1). v1 pools and standalone mode accept any model;
2. priority: header ``x-llm-d-inference-objective`` (or ``x-gateway-…``) names an InferenceObjective whose
   priority (unset → 0) overrides the criticality;
3. candidates: every endpoint, or those whose IP is in the Envoy subset hint; with
   ``--enable-conformance-test-hooks`` a ``test-epp-endpoint-selection`` header instead names
   them, and they are taken in turn, without admission or scheduling (``conformance.py``);
4. admission: sheddable (priority < 0) work is shed (429) when the saturation detector puts the
   candidates' saturation at >= 1.0 (skipped when the config sheds by itself: the v0.3 tree);
5. no candidates → 503;
6. schedule (429 when nothing fits), run PreRequest plugins, return the targets (and, with
   ``--emit-endpoint-scores``, the primary profile's weighted score of every candidate).

``explain`` runs the same steps in a dry-run mode (``explain.py``): no counters, no round-robin
turn, no PreRequest plugins, no admission state change; each step's outcome is recorded instead.

Everything is synchronous and reads the datastore and the current config once per request, so a
config reload or a datastore change lands between requests, never inside one.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Sequence

from epp.clock import Clock
from epp.config.loader import LoadedConfig
from epp.datastore.types import DatastoreReader
from epp.errors import EppError, ErrorCode
from epp.framework import headers
from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.framework.saturation import SaturationDetector
from epp.framework.scheduling import CycleState
from epp.requestcontrol.admission import admit
from epp.requestcontrol.conformance import RoundRobin, selected_endpoints
from epp.requestcontrol.explain import Admission, Explanation
from epp.requestcontrol.rewrites import ModelRewriter, weighted_target
from epp.scheduling.profile import Observe, plugin_observer
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.tracing import REQUEST_CONTROL_SCOPE, Span, span

__all__ = ["CRITICALITY_PRIORITY", "PoolDirector"]

log = logging.getLogger(__name__)

CRITICALITY_PRIORITY = {"Critical": 1, "Standard": 0, "Sheddable": -1}
_NO_CANDIDATES = "failed to find endpoint candidates for serving the request"


class PoolDirector:
    """One pool's request control: resolves model and priority, admits, picks candidates, schedules."""

    def __init__(
        self,
        datastore: DatastoreReader,
        config_provider: Callable[[], LoadedConfig],
        metrics: EppMetrics,
        clock: Clock,
        rng: random.Random,
        *,
        conformance_hooks: bool = False,
        emit_endpoint_scores: bool = False,
    ) -> None:
        self._datastore = datastore
        self._emit_scores = emit_endpoint_scores
        self._round_robin = RoundRobin() if conformance_hooks else None
        self._config = config_provider
        self._metrics = metrics
        self._clock = clock
        self._rng = rng
        self._rewriter = ModelRewriter(metrics, rng)
        self._observers: dict[tuple[str, TypedName], Observe] = {}

    def route(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        """Resolve, admit and schedule a request with a body; raises :class:`EppError`.

        Traced requests get upstream's ``gateway.request_orchestration`` span around all of it.
        """
        with span("gateway.request_orchestration", REQUEST_CONTROL_SCOPE, server=True) as orchestration:
            return self._route(request, subset, orchestration, None)

    def explain(self, request: InferenceRequest, subset: frozenset[str] | None) -> Explanation:
        """What :meth:`route` would decide for ``request``, and why, without its side effects.

        The same steps in the dry-run mode (see ``explain.py``); a failure is recorded, not raised.
        """
        explanation = Explanation(request)
        try:
            explanation.picked = self._route(request, subset, None, explanation).targets
        except EppError as e:
            explanation.error = e
        return explanation

    def _route(
        self,
        request: InferenceRequest,
        subset: frozenset[str] | None,
        orchestration: Span | None,
        explanation: Explanation | None,
    ) -> RoutingDecision:
        datastore = self._datastore
        self._resolve_model_and_priority(request, datastore, count=explanation is None)
        if orchestration is not None:
            orchestration.set_attribute("target_model", request.target_model)
            orchestration.set_attribute("request_prio", request.priority)
        chosen = self._test_selection(request) if explanation is None else None
        if chosen is not None:
            return chosen
        candidates = self._candidates(subset)
        config = self._config()
        if explanation is None:
            if config.admission:
                admit(request, candidates, config.saturation_detector, self._clock.now())
        else:
            self._explain_admission(explanation, candidates, config.saturation_detector if config.admission else None)
        if not candidates:
            raise EppError(ErrorCode.SERVICE_UNAVAILABLE, _NO_CANDIDATES)
        cycle = CycleState()
        if explanation is not None:
            result = config.scheduler.schedule(request, candidates, cycle=cycle, trace=explanation.scheduling)
            return RoutingDecision(list(result.primary.targets))  # a dry run stops before PreRequest
        result = config.scheduler.schedule(request, candidates, cycle=cycle)
        for plugin in config.pre_request:
            observe = self._observer("PreRequest", plugin.typed_name)
            start = time.perf_counter()
            try:
                plugin.pre_request(cycle, request, result)
            except Exception:  # a plugin bug must not fail a request that already has a target
                log.exception("PreRequest plugin failed", extra={"plugin": str(plugin.typed_name)})
            observe(time.perf_counter() - start)
        primary = result.primary
        decision = RoutingDecision(list(primary.targets))
        if self._emit_scores and primary.scored:  # upstream: only when the primary profile scored any
            decision.endpoint_scores = {s.state.endpoint.hostport: s.score for s in primary.scored}
        for contributor in config.response_headers:
            decision.response_headers.update(contributor.response_headers(request, result))
        return decision

    def route_headers_only(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        """A request without a body (e.g. GET /v1/models): any candidate, chosen at random."""
        chosen = self._test_selection(request)
        if chosen is not None:
            return chosen
        candidates = self._candidates(subset)
        if not candidates:
            raise EppError(ErrorCode.INTERNAL, "no pods available in datastore")
        return RoutingDecision([self._rng.choice(candidates)])

    def finished(self, request: InferenceRequest, decision: RoutingDecision | None, *, completed: bool) -> None:
        """The response ended (``completed``) or the stream stopped early: run PostResponse plugins."""
        endpoint = decision.targets[0] if decision is not None and decision.targets else None
        for plugin in self._config().post_response:
            observe = self._observer("PostResponse", plugin.typed_name)
            start = time.perf_counter()
            try:
                plugin.post_response(request, endpoint)
            except Exception:  # the response is already on its way; log and keep the stream alive
                log.exception(
                    "PostResponse plugin failed",
                    extra={"plugin": str(plugin.typed_name), "completed": completed},
                )
            observe(time.perf_counter() - start)

    def _explain_admission(
        self, explanation: Explanation, candidates: Sequence[EndpointState], detector: SaturationDetector | None
    ) -> None:
        """The admission step of a dry run: the verdict recorded, a shed raised as in a real one."""
        if detector is None:
            explanation.admission = Admission.NOT_CHECKED
            return
        try:
            admit(explanation.request, candidates, detector, self._clock.now())
        except EppError as e:
            explanation.admission, explanation.admission_reason = Admission.SHED, e.msg
            raise
        explanation.admission = Admission.ADMITTED

    def _resolve_model_and_priority(
        self, request: InferenceRequest, datastore: DatastoreReader, *, count: bool = True
    ) -> None:
        incoming = request.model
        target = headers.read(request.headers, headers.MODEL_NAME_REWRITE) or incoming
        rewritten = self._rewriter.rewrite(incoming, datastore.rewrites(), count=count)
        if rewritten is not None:
            target = rewritten
        priority = 0
        pool = datastore.pool
        if pool is not None and pool.is_v1alpha2:
            model = datastore.model(target)
            if model is None:
                raise EppError(
                    ErrorCode.NOT_FOUND, f"error finding a model object in InferenceModel for input {target}"
                )
            if model.target_models:
                target = weighted_target(model.target_models, self._rng)
            priority = CRITICALITY_PRIORITY.get(model.criticality or "", 0)
        request.target_model = target

        objective_name = headers.read(request.headers, headers.OBJECTIVE)
        if objective_name:
            request.objective = objective_name
            objective = datastore.objective(objective_name)
            if objective is not None:
                priority = objective.priority or 0
        request.priority = priority

    def _test_selection(self, request: InferenceRequest) -> RoutingDecision | None:
        """The next endpoint ``test-epp-endpoint-selection`` names; None without it or without the hooks."""
        round_robin = self._round_robin
        if round_robin is None:
            return None
        value = request.headers.get(headers.TEST_ENDPOINT_SELECTION, "").strip()
        if not value:
            return None
        selected = selected_endpoints(value, self._datastore.endpoints())
        if not selected:
            raise EppError(ErrorCode.SERVICE_UNAVAILABLE, _NO_CANDIDATES)
        return RoutingDecision([round_robin.pick(selected)])

    def _candidates(self, subset: frozenset[str] | None) -> Sequence[EndpointState]:
        endpoints = self._datastore.endpoints()
        if subset is None:
            return endpoints
        return [e for e in endpoints if e.endpoint.address in subset]

    def _observer(self, extension_point: str, typed_name: TypedName) -> Observe:
        key = (extension_point, typed_name)
        observe = self._observers.get(key)
        if observe is None:
            observe = self._observers[key] = plugin_observer(self._metrics, extension_point, typed_name)
        return observe
