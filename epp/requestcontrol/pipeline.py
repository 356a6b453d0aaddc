"""One pool's request pipeline under one loaded configuration: a request's life from its body to its response's end.

A :class:`Pipeline` is built once per (pool, configuration) by :class:`~epp.requestcontrol.pool_routing.PoolRouting`
and never changes; a request takes the pool's pipeline of the moment and keeps it to the end, so the
configuration is read once per request and a reload lands between requests, never inside one.

``parse`` reads the body with the parser that claims the request's path (400 when the body is not
one of its API's; 500 naming the parser when it raises anything else). ``route`` then runs the
stages in upstream's order (llm-d router
``requestcontrol/director.go``, plus v0.3's InferenceModel path for ``v1alpha2`` pools):

1. **resolve**: target model — header ``x-llm-d-model-name-rewrite`` (or ``x-gateway-…``), else the
   client's model; then the InferenceModelRewrite for the client's model (oldest exact rule, else
   oldest generic rule); then, for a v1alpha2 pool, the InferenceModel whose ``modelName`` is that
   name (unknown → 404; ``targetModels`` weighted split; criticality → priority Critical 1,
   Standard 0, Sheddable -1). Priority: header ``x-llm-d-inference-objective`` (or ``x-gateway-…``)
   names an InferenceObjective whose priority (unset → 0) overrides the criticality;
2. **rewrite**: when the target differs from the client's model, the body forwarded is a rewritten
   copy made by the parser (``RequestContext.forward_body``); plugins keep reading the client's body
   (upstream's parsers rewrite the decoded map in place, so its plugins read the target there: ours
   read ``request.target_model``);
3. with ``--enable-conformance-test-hooks``, a ``test-epp-endpoint-selection`` header names the
   endpoints, taken in turn without admission or scheduling (``conformance.py``);
4. **admission** (``admission.py``): shed by saturation, or wait in the flow-control queue, or
   none; the candidates are every endpoint (or those in the Envoy subset hint) by health
   (``healthy.py``): in service, else degraded, else all (fail open);
5. **data producers** (``token-producer``), awaited in configuration order; a producer that fails
   leaves the request without its data;
6. **admission plugins** (upstream's ``runAdmissionPlugins``, e.g. ``probabilistic-admitter``), in
   configuration order over the candidates: the first denial ends the request with upstream's 500
   "request cannot be admitted: <the plugin's error>"; one that fails admits;
7. **schedule**: no candidates → 503; the scheduling cycle (429 when nothing fits);
8. **pre-request**: PreRequest plugins learn the decision; the response headers plugins contribute,
   and so do the plugins that tell the model server something on the forwarded request (a
   disaggregation handler names the prefill pod; a client's copy of such a header is removed);
   a disaggregation handler's decision goes to the recorder; with ``--emit-endpoint-scores``, the
   primary profile's weighted score of every candidate; the request counts in flight on its
   target until ``finished``.

Every plugin failure is counted in ``epp_plugin_errors_total`` and logged (``scheduling.plugin_errors``).
Every effect (counting, queueing, timing, PreRequest) goes through the context's
:class:`~epp.requestcontrol.recorder.Recorder`, so ``Explain`` runs this same code with a recorder
that records. ``finished``, called once per served request however it ends, releases the in-flight
load, feeds the response's status back to the endpoint's health (a 5xx counts as a failure, Envoy's
own 502/503 makes it unreachable at once, anything else is a success) and runs PostResponse plugins.
Before it, a response seen to its end is handed to the ResponseStreaming plugins
(``response_complete``: its usage in, dynamic metadata out).
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass

from epp.clock import Clock
from epp.config.kinds import playing
from epp.config.loader import LoadedConfig
from epp.datastore.types import DatastoreReader
from epp.errors import EppError, ErrorCode
from epp.flowcontrol.controller import FlowController
from epp.framework import headers
from epp.framework.admission import Admitter
from epp.framework.endpoint import EndpointState
from epp.framework.health import Health
from epp.framework.parsing import Parser, request_path
from epp.framework.plugin import PluginKind
from epp.framework.request import ApiKind, InferenceRequest, RoutingDecision
from epp.framework.request_header import AGENT_IDENTITY, RequestHeaderProcessor
from epp.framework.response import CompletedResponse, ResponseComplete, ResponseTiming, Usage
from epp.framework.scheduling import CycleState, PostResponse, UpstreamHeaderContributor
from epp.framework.staleness import Staleness
from epp.requestcontrol.admission import AdmissionStage, NoAdmission, QueueAdmission, SaturationAdmission
from epp.requestcontrol.conformance import RoundRobin, selected_endpoints
from epp.requestcontrol.context import RequestContext
from epp.requestcontrol.healthy import healthy_candidates
from epp.requestcontrol.in_flight import count_out
from epp.requestcontrol.recorder import Recorder, ServingRecorder, TimedPreRequest
from epp.requestcontrol.rewrites import ModelRewriter, weighted_target
from epp.scheduling.plugin_errors import EXCEPTION
from epp.scheduling.profile import plugin_observer
from epp.scheduling.recorder import Observe
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.tracing import REQUEST_CONTROL_SCOPE, span

__all__ = ["CRITICALITY_PRIORITY", "NO_CANDIDATES", "Pipeline", "PoolParts"]


CRITICALITY_PRIORITY = {"Critical": 1, "Standard": 0, "Sheddable": -1}
NO_CANDIDATES = "failed to find endpoint candidates for serving the request"
_UNREACHABLE_REPLIES = frozenset((502, 503))  # Envoy's own: connect failure, reset before headers


@dataclass(frozen=True, slots=True)
class PoolParts:
    """What every pipeline of one pool shares, whatever its configuration: the pool's live state."""

    name: str
    datastore: DatastoreReader
    clock: Clock
    rng: random.Random
    rewriter: ModelRewriter
    recorder: ServingRecorder
    staleness: Staleness
    """``--metrics-staleness-threshold``: stale metrics make an endpoint degraded (``healthy.py``)."""
    emit_scores: bool = False
    turns: RoundRobin | None = None
    """The conformance hooks' round robin; None without ``--enable-conformance-test-hooks``."""
    flow_control: FlowController | None = None


class Pipeline:
    """One pool's pipeline under one configuration; immutable once built."""

    __slots__ = (
        "_admission",
        "_admitters",
        "_header_processors",
        "_pool",
        "_post_response",
        "_pre_request",
        "_producers",
        "_response_complete",
        "_scheduler",
        "_upstream_headers",
        "config",
    )

    def __init__(self, pool: PoolParts, config: LoadedConfig, metrics: EppMetrics | None) -> None:
        """``config`` in force for ``pool``: the plugins' duration series are made here, not at load."""
        self.config = config
        self._pool = pool
        self._scheduler = config.scheduler if metrics is None else config.scheduler.observed(metrics)
        admission: AdmissionStage = NoAdmission()
        if pool.flow_control is not None:
            admission = QueueAdmission(pool.flow_control)
        elif config.admission:
            admission = SaturationAdmission(config.saturation_detector, pool.clock)
        self._admission = admission
        self._producers = tuple(
            (p, plugin_observer(metrics, "PrepareData", p.typed_name)) for p in config.data_producers
        )
        self._header_processors = tuple(
            (p, plugin_observer(metrics, "RequestHeaderProcessor", p.typed_name))
            for p in playing(config.plugins.values(), PluginKind.REQUEST_HEADER)
            if isinstance(p, RequestHeaderProcessor)
        )
        self._admitters = tuple(
            (p, plugin_observer(metrics, "Admission", p.typed_name))
            for p in playing(config.plugins.values(), PluginKind.ADMITTER)
            if isinstance(p, Admitter)
        )
        self._pre_request: tuple[TimedPreRequest, ...] = tuple(
            (p, plugin_observer(metrics, "PreRequest", p.typed_name)) for p in config.pre_request
        )
        self._response_complete = tuple(
            (p, plugin_observer(metrics, "ResponseStreaming", p.typed_name))
            for p in playing(config.plugins.values(), PluginKind.RESPONSE_STREAMING)
            if isinstance(p, ResponseComplete)
        )
        self._post_response: tuple[tuple[PostResponse, Observe], ...] = tuple(
            (p, plugin_observer(metrics, "PostResponse", p.typed_name)) for p in config.post_response
        )
        self._upstream_headers = tuple(p for p in config.plugins.values() if isinstance(p, UpstreamHeaderContributor))

    # -- a request's context ---------------------------------------------------------------------

    def context(
        self, request: InferenceRequest, subset: frozenset[str] | None, recorder: Recorder | None = None
    ) -> RequestContext:
        """A context for ``request`` (served, unless ``recorder`` says otherwise), before any body is read."""
        return RequestContext(request, subset, recorder if recorder is not None else self._pool.recorder)

    def parse(
        self,
        request: InferenceRequest,
        raw: bytes,
        subset: frozenset[str] | None,
        recorder: Recorder | None = None,
    ) -> RequestContext:
        """Read ``raw`` with the parser that claims the request's path; ``EppError(BAD_REQUEST)`` when it is
        not a body of that parser's API (or no parser claims the path)."""
        parser, api = self.config.parsers.resolve(request_path(request.headers))
        ctx = self.context(request, subset, recorder)
        try:
            parsed = parser.parse(raw, api)
        except EppError:
            raise
        except Exception as exc:  # a parser bug: 500 naming it, not the stream's anonymous one
            raise _parser_failed(parser, exc, ctx.recorder) from exc
        parsed.apply_to(request, len(raw))
        ctx.parsed, ctx.parser = parsed, parser
        return ctx

    # -- routing -----------------------------------------------------------------------------------

    async def route(self, ctx: RequestContext) -> RoutingDecision:
        """Resolve, rewrite, admit (possibly waiting in the queue), produce, schedule; raises EppError.

        Traced requests get upstream's ``gateway.request_orchestration`` span around it.
        """
        request, recorder = ctx.request, ctx.recorder
        with span("gateway.request_orchestration", REQUEST_CONTROL_SCOPE, server=True) as orchestration:
            if self._header_processors:
                self._process_headers(request, recorder)
            self._resolve(request, recorder)
            if orchestration is not None:
                orchestration.set_attribute("target_model", request.target_model)
                orchestration.set_attribute("request_prio", request.priority)
            ctx.forward_body = self._forward_body(ctx)
            chosen = self._test_selection(request, recorder)
            if chosen is not None:
                decision = RoutingDecision([chosen])
            else:
                candidates = await recorder.admit(
                    self._admission, request, functools.partial(self._candidates, ctx.subset, recorder)
                )
                if self._producers:
                    await self._produce(request, candidates, recorder)
                    recorder.produced(request, candidates)
                if self._admitters:
                    self._admit(request, candidates, recorder)
                decision = self._schedule(request, candidates, recorder)
            recorder.routed(request, decision, self.config.in_flight)
        _decided(ctx, decision)
        return decision

    def route_headers_only(self, ctx: RequestContext) -> RoutingDecision:
        """A request without a body (e.g. GET /v1/models): any candidate, chosen at random."""
        request, recorder = ctx.request, ctx.recorder
        request.api = ApiKind.NONE
        chosen = self._test_selection(request, recorder)
        if chosen is None:
            candidates = self._candidates(ctx.subset, recorder)
            if not candidates:
                raise EppError(ErrorCode.INTERNAL, "no pods available in datastore")
            chosen = self._pool.rng.choice(candidates)
        decision = RoutingDecision([chosen])
        _decided(ctx, decision)
        recorder.routed(request, decision, self.config.in_flight)
        return decision

    def _resolve(self, request: InferenceRequest, recorder: Recorder) -> None:
        """Target model, objective and priority, onto ``request``."""
        pool = self._pool
        datastore = pool.datastore
        incoming = request.model
        target = headers.read(request.headers, headers.MODEL_NAME_REWRITE) or incoming
        rewritten = pool.rewriter.rewrite(incoming, datastore.rewrites())
        if rewritten is not None:
            rewrite_name, target = rewritten
            recorder.rewritten(rewrite_name, incoming, target)
        priority = 0
        spec = datastore.pool
        if spec is not None and spec.is_v1alpha2:
            model = datastore.model(target)
            if model is None:
                raise EppError(
                    ErrorCode.NOT_FOUND, f"error finding a model object in InferenceModel for input {target}"
                )
            if model.target_models:
                target = weighted_target(model.target_models, pool.rng)
            priority = CRITICALITY_PRIORITY.get(model.criticality or "", 0)
        request.target_model = target

        objective_name = headers.read(request.headers, headers.OBJECTIVE)
        if objective_name:
            request.objective = objective_name
            objective = datastore.objective(objective_name)
            if objective is not None:
                priority = objective.priority or 0
        request.priority = priority
        explicit = headers.read(request.headers, headers.FAIRNESS_ID)
        identity = request.attributes.get(AGENT_IDENTITY)
        request.fairness_id = explicit or (identity if isinstance(identity, str) else "") or headers.DEFAULT_FAIRNESS_ID

    def _process_headers(self, request: InferenceRequest, recorder: Recorder) -> None:
        """The request-header processors, in order; a failing one is skipped (counted, logged)."""
        for processor, observe in self._header_processors:
            start = time.perf_counter()
            try:
                processor.request_header(request)
            except Exception as exc:  # a plugin bug must not fail the request: it goes on without what it reads
                detail = f"{type(exc).__name__}: {exc}"
                recorder.cycle.plugin_failed("RequestHeaderProcessor", processor.typed_name, EXCEPTION, detail, exc)
            recorder.timed(observe, time.perf_counter() - start)

    @staticmethod
    def _forward_body(ctx: RequestContext) -> bytes | None:
        """The body the model server gets when it is sent another model than the client asked for."""
        request, parsed, parser = ctx.request, ctx.parsed, ctx.parser
        target = request.target_model
        if parsed is None or parser is None or not target or target == request.model:
            return None
        try:
            return parser.with_model(parsed, target)
        except Exception as exc:
            raise _parser_failed(parser, exc, ctx.recorder) from exc

    def _test_selection(self, request: InferenceRequest, recorder: Recorder) -> EndpointState | None:
        """The endpoint ``test-epp-endpoint-selection`` names next; None without it or without the hooks."""
        turns = self._pool.turns
        if turns is None:
            return None
        value = request.headers.get(headers.TEST_ENDPOINT_SELECTION, "").strip()
        if not value:
            return None
        selected = selected_endpoints(value, self._pool.datastore.endpoints())
        if not selected:
            raise EppError(ErrorCode.SERVICE_UNAVAILABLE, NO_CANDIDATES)
        return recorder.take_turn(turns, selected)

    def _candidates(self, subset: frozenset[str] | None, recorder: Recorder) -> Sequence[EndpointState]:
        """The endpoints to schedule on, by health; a fail-open is counted through ``recorder``."""
        pool = self._pool
        endpoints = pool.datastore.endpoints()
        if subset is not None:
            endpoints = [e for e in endpoints if e.endpoint.address in subset]
        candidates, fail_open = healthy_candidates(endpoints, pool.clock.now(), pool.staleness)
        if fail_open:
            recorder.failed_open()
        return candidates

    async def _produce(
        self, request: InferenceRequest, candidates: Sequence[EndpointState], recorder: Recorder
    ) -> None:
        for producer, observe in self._producers:
            start = time.perf_counter()
            try:
                await producer.produce(request, candidates)
            except Exception as exc:  # a producer bug must not fail the request: it is scheduled without the data
                detail = f"{type(exc).__name__}: {exc}"
                recorder.cycle.plugin_failed("PrepareData", producer.typed_name, EXCEPTION, detail, exc)
            recorder.timed(observe, time.perf_counter() - start)

    def _admit(self, request: InferenceRequest, candidates: Sequence[EndpointState], recorder: Recorder) -> None:
        """The admission plugins, in order; the first denial raises upstream's Internal (500)."""
        for admitter, observe in self._admitters:
            start = time.perf_counter()
            try:
                denial = admitter.admit(request, candidates)
            except Exception as exc:  # a plugin bug must not refuse every request: it admits
                detail = f"{type(exc).__name__}: {exc}"
                recorder.cycle.plugin_failed("Admission", admitter.typed_name, EXCEPTION, detail, exc)
                denial = None
            recorder.timed(observe, time.perf_counter() - start)
            if denial is not None:
                raise EppError(ErrorCode.INTERNAL, f"request cannot be admitted: {denial}")

    def _schedule(
        self, request: InferenceRequest, candidates: Sequence[EndpointState], recorder: Recorder
    ) -> RoutingDecision:
        if not candidates:
            raise EppError(ErrorCode.SERVICE_UNAVAILABLE, NO_CANDIDATES)
        config = self.config
        cycle = CycleState()
        result = self._scheduler.schedule(request, candidates, cycle, recorder.cycle)
        recorder.pre_request(self._pre_request, cycle, request, result)
        if result.disaggregation is not None:
            recorder.disaggregated(request, result.disaggregation)
        primary = result.primary
        decision = RoutingDecision(list(primary.targets), port=result.target_port)
        if self._pool.emit_scores and primary.scored:  # upstream: only when the primary profile scored any
            decision.endpoint_scores = {s.state.endpoint.hostport: s.score for s in primary.scored}
        for contributor in config.response_headers:
            decision.response_headers.update(contributor.response_headers(request, result))
        if self._upstream_headers:
            owned: set[str] = set()
            for upstream in self._upstream_headers:
                decision.upstream_headers.update(upstream.upstream_headers(request, result))
                owned.update(upstream.owned_upstream_headers)
            sent = request.headers
            decision.cleared_headers = frozenset(h for h in owned if h in sent and h not in decision.upstream_headers)
        return decision

    # -- the end -----------------------------------------------------------------------------------

    def response_complete(
        self, ctx: RequestContext, usage: Usage | None, status: int, timing: ResponseTiming | None = None
    ) -> dict[str, dict[str, float]]:
        """The response reached its end: the ResponseStreaming plugins read its ``usage`` (zeros when it carried
        none, as upstream's) and ``timing``; returns the dynamic metadata they set, for the response's last answer."""
        plugins = self._response_complete
        if not plugins:
            return {}
        request, recorder = ctx.request, ctx.recorder
        response = CompletedResponse(usage or Usage(), status, timing=timing)
        for plugin, observe in plugins:
            start = time.perf_counter()
            try:
                plugin.response_complete(request, response)
            except Exception as exc:  # the response is already on its way; count, log and keep the stream alive
                detail = f"{type(exc).__name__}: {exc}"
                recorder.cycle.plugin_failed("ResponseStreaming", plugin.typed_name, EXCEPTION, detail, exc)
            recorder.timed(observe, time.perf_counter() - start)
        return response.dynamic_metadata

    def finished(self, ctx: RequestContext, *, completed: bool, status: int = 0, gateway_reply: bool = False) -> None:
        """The response ended (``completed``) or the stream stopped early: release the request's in-flight
        load, tell the endpoint's health the response's HTTP ``status`` (0: none came; ``gateway_reply``:
        Envoy's own), run PostResponse plugins. Called exactly once per served request that reached its
        pipeline."""
        request, decision = ctx.request, ctx.decision
        endpoint = decision.targets[0] if decision is not None and decision.targets else None
        if endpoint is not None:
            count_out(request, endpoint)
            if status:
                health = endpoint.health
                if status >= 500 or health.state is not Health.HEALTHY or health.failures:
                    self._tell_health(endpoint, status, gateway_reply, ctx.routed_epoch)
        errors = self._pool.recorder.errors
        for plugin, observe in self._post_response:
            start = time.perf_counter()
            try:
                plugin.post_response(request, endpoint)
            except Exception as exc:  # the response is already on its way; count, log and keep the stream alive
                errors.failed("PostResponse", plugin.typed_name, EXCEPTION, f"{type(exc).__name__}: {exc}", exc)
            elapsed = time.perf_counter() - start
            observe(elapsed)
            errors.timed("PostResponse", plugin.typed_name, elapsed)

    def _tell_health(self, endpoint: EndpointState, status: int, gateway_reply: bool, epoch: int) -> None:
        """5xx: a failure (Envoy's own 502/503: unreachable at once); anything else: a success."""
        health = endpoint.health
        now = self._pool.clock.now()
        if status < 500:
            health.response_ok(now, epoch)
        elif gateway_reply and status in _UNREACHABLE_REPLIES:
            health.unreachable(f"Envoy answered {status} itself: could not reach it", now)
        else:
            health.response_failed(f"HTTP {status}", now)


def _decided(ctx: RequestContext, decision: RoutingDecision) -> None:
    ctx.decision = decision
    ctx.routed_epoch = decision.targets[0].health.epoch if decision.targets else 0


def _parser_failed(parser: Parser, exc: Exception, recorder: Recorder) -> EppError:
    """A parser that raised something else than its API's 400: told to the recorder, 500 naming the parser."""
    detail = f"{type(exc).__name__}: {exc}"
    recorder.cycle.plugin_failed("Parser", parser.typed_name, EXCEPTION, detail, exc)
    return EppError(ErrorCode.INTERNAL, f"parser {parser.typed_name} failed: {detail}")
