"""The pool director: everything between a parsed request and the endpoint Envoy should route to.

The ext_proc stream only carries the request (headers, parsed body); this is the one place that
resolves what the request *means*: target model, objective and priority. ``route`` (body
requests), in order (upstream ``requestcontrol/director.go``, plus v0.3's
InferenceModel path for ``v1alpha2`` pools):

0. (``prepare``, awaited by the stream first, only when the config has data producers) run them;
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
   then by health (``healthy.py``): those in service, else the degraded, else all (fail open);
4. admission: sheddable (priority < 0) work is shed (429) when the saturation detector puts the
   candidates' saturation at >= 1.0 (skipped when the config sheds by itself: the v0.3 tree);
   with flow control (``flow_control``, the ``flowControl`` gate) every request is queued
   instead, and one the queue holds is returned as an awaitable that schedules once released;
5. no candidates → 503;
6. schedule (429 when nothing fits), run PreRequest plugins, return the targets (and, with
   ``--emit-endpoint-scores``, the primary profile's weighted score of every candidate).

Every decision counts the request in flight on its first target (one request, the configured
token estimate) until ``finished``, which the stream calls exactly once however it ends.

``finished`` feeds the response's status back to the chosen endpoint's health (a 5xx counts as a
failure, Envoy's own 502/503 makes it unreachable at once, anything else is a success).

``explain`` runs the same steps in a dry-run mode (``explain.py``): no counters, no round-robin
turn, no queue, no PreRequest plugins, no admission state change, no in-flight count; each
step's outcome is recorded instead.

Everything but the wait in the queue is synchronous and reads the datastore and the current
config once per request (after the wait, for a queued request), so a config reload or a
datastore change lands between requests, never inside one.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence

from epp.clock import Clock
from epp.config.loader import LoadedConfig
from epp.datastore.types import DatastoreReader
from epp.errors import EppError, ErrorCode
from epp.flowcontrol.controller import FlowController
from epp.flowcontrol.queues import Item
from epp.framework import headers
from epp.framework.endpoint import EndpointState
from epp.framework.health import Health
from epp.framework.plugin import TypedName
from epp.framework.producers import DataProducer
from epp.framework.request import ApiKind, InferenceRequest, RoutingDecision
from epp.framework.saturation import SaturationDetector
from epp.framework.scheduling import CycleState
from epp.requestcontrol.admission import admit
from epp.requestcontrol.conformance import RoundRobin, selected_endpoints
from epp.requestcontrol.explain import Admission, Explanation
from epp.requestcontrol.healthy import healthy_candidates
from epp.requestcontrol.rewrites import ModelRewriter, weighted_target
from epp.scheduling.profile import Observe, plugin_observer
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.tracing import REQUEST_CONTROL_SCOPE, Span, span

__all__ = ["CRITICALITY_PRIORITY", "PoolDirector"]

log = logging.getLogger(__name__)

CRITICALITY_PRIORITY = {"Critical": 1, "Standard": 0, "Sheddable": -1}
_NO_CANDIDATES = "failed to find endpoint candidates for serving the request"
_UNREACHABLE_REPLIES = frozenset((502, 503))  # Envoy's own: connect failure, reset before headers


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
        staleness_threshold: float = 2.0,
        pool_name: str = "",
        flow_control: FlowController | None = None,
    ) -> None:
        """``staleness_threshold``: metrics older than this make an endpoint degraded (``healthy.py``);
        ``pool_name`` labels the fail-open count."""
        self._datastore = datastore
        self._staleness = staleness_threshold
        self._fail_open = metrics.endpoint_health_fail_open.labels(pool_name)
        self._flow_control = flow_control
        self._emit_scores = emit_endpoint_scores
        self._round_robin = RoundRobin() if conformance_hooks else None
        self._config = config_provider
        self._metrics = metrics
        self._clock = clock
        self._rng = rng
        self._rewriter = ModelRewriter(metrics, rng)
        self._observers: dict[tuple[str, TypedName], Observe] = {}

    def route(
        self, request: InferenceRequest, subset: frozenset[str] | None
    ) -> RoutingDecision | Awaitable[RoutingDecision]:
        """Resolve, admit and schedule a request with a body; raises :class:`EppError`.

        With flow control, a request the queue holds comes back as an awaitable of its decision.
        Traced requests get upstream's ``gateway.request_orchestration`` span around the
        synchronous part (resolution, admission or enqueue, and scheduling when not queued).
        """
        with span("gateway.request_orchestration", REQUEST_CONTROL_SCOPE, server=True) as orchestration:
            decision = self._route(request, subset, orchestration, None)
        if isinstance(decision, RoutingDecision):  # a queued request is counted once dispatched
            self._count_in(request, decision)
        return decision

    def explain(self, request: InferenceRequest, subset: frozenset[str] | None) -> Explanation:
        """What :meth:`route` would decide for ``request``, and why, without its side effects.

        The same steps in the dry-run mode (see ``explain.py``); a failure is recorded, not raised.
        """
        explanation = Explanation(request)
        try:
            decision = self._route(request, subset, None, explanation)
            assert isinstance(decision, RoutingDecision)  # a dry run never queues
            explanation.picked = decision.targets
        except EppError as e:
            explanation.error = e
        return explanation

    def _route(
        self,
        request: InferenceRequest,
        subset: frozenset[str] | None,
        orchestration: Span | None,
        explanation: Explanation | None,
    ) -> RoutingDecision | Awaitable[RoutingDecision]:
        datastore = self._datastore
        self._resolve_model_and_priority(request, datastore, count=explanation is None)
        if orchestration is not None:
            orchestration.set_attribute("target_model", request.target_model)
            orchestration.set_attribute("request_prio", request.priority)
        chosen = self._test_selection(request) if explanation is None else None
        if chosen is not None:
            return chosen
        flow_control = self._flow_control
        if flow_control is not None and explanation is None:
            item = flow_control.enqueue(request)
            if not item.future.done():
                return self._after_queue(flow_control, item, subset)
            item.future.result()  # dispatched at once (or refused: raises its EppError)
            return self._schedule(request, self._candidates(subset), self._config())
        candidates = self._candidates(subset, count=explanation is None)
        config = self._config()
        if explanation is None:
            if config.admission:
                admit(request, candidates, config.saturation_detector, self._clock.now())
        else:  # with flow control the queue stands where admission would: a dry run does not enqueue
            gate = config.saturation_detector if config.admission and flow_control is None else None
            self._explain_admission(explanation, candidates, gate)
        return self._schedule(request, candidates, config, explanation)

    async def _after_queue(
        self, flow_control: FlowController, item: Item, subset: frozenset[str] | None
    ) -> RoutingDecision:
        """Wait for the queue to release ``item``, then schedule on the pool as it is by then."""
        await flow_control.wait(item)
        decision = self._schedule(item.request, self._candidates(subset), self._config())
        self._count_in(item.request, decision)
        return decision

    def _schedule(
        self,
        request: InferenceRequest,
        candidates: Sequence[EndpointState],
        config: LoadedConfig,
        explanation: Explanation | None = None,
    ) -> RoutingDecision:
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

    def prepare(self, request: InferenceRequest) -> Awaitable[None] | None:
        """The config's data producers (``token-producer``) to await before :meth:`route`; None without any."""
        producers = self._config().data_producers
        if not producers:
            return None
        return self._produce(producers, request)

    async def _produce(self, producers: Sequence[DataProducer], request: InferenceRequest) -> None:
        for producer in producers:
            observe = self._observer("PrepareData", producer.typed_name)
            start = time.perf_counter()
            try:
                await producer.produce(request)
            except Exception:  # a producer bug must not fail the request: it is scheduled without the data
                log.exception("data producer failed", extra={"plugin": str(producer.typed_name)})
            observe(time.perf_counter() - start)

    def route_headers_only(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        """A request without a body (e.g. GET /v1/models): any candidate, chosen at random."""
        chosen = self._test_selection(request)
        if chosen is not None:
            return chosen
        candidates = self._candidates(subset)
        if not candidates:
            raise EppError(ErrorCode.INTERNAL, "no pods available in datastore")
        decision = RoutingDecision([self._rng.choice(candidates)])
        self._count_in(request, decision)
        return decision

    def api_for(self, path: str) -> ApiKind:
        """The API of a body sent to ``path``, by the current configuration's parsers (400 when none takes it)."""
        return self._config().parsers.resolve(path)

    def finished(
        self,
        request: InferenceRequest,
        decision: RoutingDecision | None,
        *,
        completed: bool,
        status: int = 0,
        gateway_reply: bool = False,
    ) -> None:
        """The response ended (``completed``) or the stream stopped early: release its in-flight load,
        tell the endpoint's health the response's HTTP ``status`` (0: none came; ``gateway_reply``:
        Envoy's own), run PostResponse plugins."""
        endpoint = decision.targets[0] if decision is not None and decision.targets else None
        if endpoint is not None:
            endpoint.in_flight_requests -= 1
            endpoint.in_flight_tokens -= request.in_flight_tokens
            if status:
                health = endpoint.health
                if status >= 500 or health.state is not Health.HEALTHY or health.failures:
                    self._tell_health(endpoint, status, gateway_reply)
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

    def _count_in(self, request: InferenceRequest, decision: RoutingDecision) -> None:
        """The request is in flight on its first target from now until :meth:`finished`."""
        if decision.targets:
            target = decision.targets[0]
            tokens = request.in_flight_tokens = self._config().in_flight.estimate_tokens(request)
            target.in_flight_requests += 1
            target.in_flight_tokens += tokens

    def _tell_health(self, endpoint: EndpointState, status: int, gateway_reply: bool) -> None:
        """5xx: a failure (Envoy's own 502/503: unreachable at once); anything else: a success."""
        health = endpoint.health
        if status < 500:
            health.response_ok(self._clock.now())
        elif gateway_reply and status in _UNREACHABLE_REPLIES:
            health.unreachable(f"Envoy answered {status} itself: could not reach it", self._clock.now())
        else:
            health.response_failed(f"HTTP {status}", self._clock.now())

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

    def _candidates(self, subset: frozenset[str] | None, *, count: bool = True) -> Sequence[EndpointState]:
        """The endpoints to schedule on, by health; ``count`` False (a dry run) leaves the fail-open counter."""
        endpoints = self._datastore.endpoints()
        if subset is not None:
            endpoints = [e for e in endpoints if e.endpoint.address in subset]
        candidates, fail_open = healthy_candidates(endpoints, self._clock.now(), self._staleness)
        if fail_open and count:
            self._fail_open.inc()
        return candidates

    def _observer(self, extension_point: str, typed_name: TypedName) -> Observe:
        key = (extension_point, typed_name)
        observe = self._observers.get(key)
        if observe is None:
            observe = self._observers[key] = plugin_observer(self._metrics, extension_point, typed_name)
        return observe
