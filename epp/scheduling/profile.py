"""One scheduling profile: filters, then weighted scorers, then exactly one picker.

The runner enforces the plugin contracts instead of trusting them (upstream
``scheduler_profile.go``): a filter that empties the set fails the profile ("no endpoints
available for the given request"); every score is clamped to [0, 1] (NaN counts as 0) before it
is multiplied by the scorer's weight; a picker returning nothing fails the profile. A plugin that
breaks its contract does not fail the request (docs/plugins.md, "When a plugin fails"): a filter
that raises or returns something else than a list is skipped (its input passes on), a scorer that
raises or returns the wrong number of scores, or anything but numbers, adds nothing, a picker that
raises or returns no ``ProfileResult`` is replaced by the best total; each is told to the recorder
(``plugin_failed``, counted as ``epp_plugin_errors_total``), and so is a scorer whose scores had to be
clamped. Each plugin call is timed into
``inference_extension_plugin_duration_seconds{extension_point, plugin_type, plugin_name}``
through a histogram child resolved once at build time, so timing costs one ``observe`` per call.

When the request is traced, a run is a ``run_scheduler_profile`` span with one child per stage,
named and annotated as upstream's (``filter_endpoints``, ``llm_d.epp.scoring`` with an
``llm_d.epp.scorer.<type>`` child per scorer, ``pick_endpoints``); untraced, each would-be span
costs one ContextVar read (:func:`epp.telemetry.tracing.span`).

Every step is told to the cycle's :class:`~epp.scheduling.recorder.CycleRecorder` with its timer and
its outcome: a served request's recorder observes the duration, Explain's keeps the outcome. The
runner itself does the same work either way.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, Filter, Picker, ProfileResult, ScoredEndpoint, Scorer
from epp.scheduling.plugin_errors import EXCEPTION, MALFORMED, OUT_OF_RANGE
from epp.scheduling.recorder import CycleRecorder, Observe, SchedulingSeries, accumulate, discard
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.tracing import SCHEDULING_SCOPE, Span, span

__all__ = [
    "NO_ENDPOINTS",
    "ProfileError",
    "SchedulerProfile",
    "WeightedScorer",
    "plugin_observer",
]

NO_ENDPOINTS = "no endpoints available for the given request"

_TRACED_TOP_ENDPOINTS = 5  # upstream's maxTracedEndpointScores: the pick span names the best few
_NO_SCORE = float("nan")  # what Explain shows as the raw score of a scorer that failed (it adds 0)


def plugin_observer(metrics: EppMetrics | None, extension_point: str, typed_name: TypedName) -> Observe:
    """The ``observe`` of this plugin's duration histogram child (a no-op without metrics)."""
    if metrics is None:
        return discard
    durations = metrics.series(SchedulingSeries).plugin_duration
    return durations.labels(extension_point, typed_name.type, typed_name.name).observe


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
            (
                ws.scorer,
                ws.weight,
                plugin_observer(metrics, "Scorer", ws.scorer.typed_name),
                f"llm_d.epp.scorer.{ws.scorer.typed_name.type}",  # its span's name, made once
            )
            for ws in self.scorers
        )
        self._picker = (picker, plugin_observer(metrics, "Picker", picker.typed_name))

    @property
    def name(self) -> str:
        return self._name

    def observed(self, metrics: EppMetrics) -> SchedulerProfile:
        """The same profile, timing each plugin call into its duration series (whose children are made now)."""
        return SchedulerProfile(
            self._name, filters=self.filters, scorers=self.scorers, picker=self.picker, metrics=metrics
        )

    def run(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        candidates: Sequence[EndpointState],
        recorder: CycleRecorder,
    ) -> ProfileResult:
        """Filter, score and pick, telling ``recorder`` each step; raises :class:`ProfileError` when no
        endpoint comes out."""
        with span("run_scheduler_profile", SCHEDULING_SCOPE) as profile_span:
            if profile_span is not None:
                profile_span.set_attribute("llm_d.epp.scheduling.profile.name", self._name)
            endpoints = self._filter(cycle, request, candidates, recorder)
            totals = self._score(cycle, request, endpoints, recorder)
            return self._pick(cycle, request, endpoints, totals, recorder)

    def _filter(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        candidates: Sequence[EndpointState],
        recorder: CycleRecorder,
    ) -> Sequence[EndpointState]:
        clock = time.perf_counter
        endpoints = candidates
        with span("filter_endpoints", SCHEDULING_SCOPE) as stage:
            if stage is not None:
                stage.set_attribute("llm_d.epp.filter.candidate_endpoints", len(candidates))
                _request_attributes(stage, request)
            for plugin, observe in self._filters:
                start = clock()
                kept: Sequence[EndpointState]
                try:
                    kept = plugin.filter(cycle, request, endpoints)
                except Exception as exc:  # a failing filter is skipped: its input passes on
                    recorder.plugin_failed("Filter", plugin.typed_name, EXCEPTION, _described(exc), exc)
                    kept = endpoints
                else:
                    if not isinstance(kept, list | tuple):
                        detail = f"returned a {type(kept).__name__}, not a list of endpoints"
                        recorder.plugin_failed("Filter", plugin.typed_name, MALFORMED, detail, None)
                        kept = endpoints
                endpoints = kept
                recorder.filtered(plugin.typed_name, observe, endpoints, clock() - start)
                if not endpoints:
                    break
            if stage is not None:
                stage.set_attribute("llm_d.epp.filter.filtered_endpoints", len(endpoints))
        if not endpoints:
            raise ProfileError(NO_ENDPOINTS)
        return endpoints

    def _score(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        endpoints: Sequence[EndpointState],
        recorder: CycleRecorder,
    ) -> list[float]:
        clock = time.perf_counter
        count = len(endpoints)
        totals = [0.0] * count
        with span("llm_d.epp.scoring", SCHEDULING_SCOPE) as stage:
            if stage is not None:
                stage.set_attribute("llm_d.epp.scorer.count", len(self._scorers))
                stage.set_attribute("llm_d.epp.scoring.candidate_endpoints", count)
                _request_attributes(stage, request)
            for scorer, weight, observe, span_name in self._scorers:
                with span(span_name, SCHEDULING_SCOPE) as scorer_span:
                    start = clock()
                    try:
                        scores = scorer.score(cycle, request, endpoints)
                    except Exception as exc:  # a failing scorer adds nothing
                        elapsed = clock() - start
                        recorder.plugin_failed("Scorer", scorer.typed_name, EXCEPTION, _described(exc), exc)
                        recorder.scored(scorer.typed_name, observe, weight, [_NO_SCORE] * count, elapsed)
                        continue
                    elapsed = clock() - start
                    malformed = _malformed(scores, count)
                    if malformed:
                        recorder.plugin_failed("Scorer", scorer.typed_name, MALFORMED, malformed, None)
                        recorder.scored(scorer.typed_name, observe, weight, [_NO_SCORE] * count, elapsed)
                        continue
                    if scorer_span is not None:
                        _scorer_attributes(scorer_span, scorer.typed_name, weight, count, scores)
                recorder.scored(scorer.typed_name, observe, weight, scores, elapsed)
                if not accumulate(totals, scores, weight):
                    detail = "returned scores outside [0, 1], clamped: " + _outside(scores)
                    recorder.plugin_failed("Scorer", scorer.typed_name, OUT_OF_RANGE, detail, None)
        return totals

    def _pick(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        endpoints: Sequence[EndpointState],
        totals: list[float],
        recorder: CycleRecorder,
    ) -> ProfileResult:
        picker, observe = self._picker
        scored = [ScoredEndpoint(e, s) for e, s in zip(endpoints, totals, strict=True)]
        with span("pick_endpoints", SCHEDULING_SCOPE) as stage:
            if stage is not None:  # before the pick: pickers may reorder ``scored``
                _picker_attributes(stage, request, scored)
            start = time.perf_counter()
            try:
                result = picker.pick(cycle, request, scored)
            except Exception as exc:  # a failing picker's choice is the best total
                recorder.plugin_failed("Picker", picker.typed_name, EXCEPTION, _described(exc), exc)
                result = _best(endpoints, totals)
            else:
                if not isinstance(result, ProfileResult):
                    detail = f"returned a {type(result).__name__}, not a ProfileResult"
                    recorder.plugin_failed("Picker", picker.typed_name, MALFORMED, detail, None)
                    result = _best(endpoints, totals)
            recorder.picked(picker.typed_name, observe, endpoints, totals, result.targets, time.perf_counter() - start)
        if not result.targets:
            raise ProfileError(f"picker {picker.typed_name} returned no endpoints")
        result.scored = scored  # every candidate, though pickers may have reordered it (one reference)
        return result

    def __repr__(self) -> str:
        scorers = ", ".join(f"{ws.scorer.typed_name}: {ws.weight:g}" for ws in self.scorers)
        filters = ", ".join(str(f.typed_name) for f in self.filters)
        picker = self.picker.typed_name
        return f"SchedulerProfile({self._name!r}, filters=[{filters}], scorers=[{scorers}], picker={picker})"


def _described(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def _malformed(scores: Sequence[float], count: int) -> str:
    """Why ``scores`` cannot be used for ``count`` endpoints ("" when they can)."""
    try:
        if len(scores) != count:
            return f"returned {len(scores)} scores for {count} endpoints"
        sum(scores)  # one C loop: anything but numbers fails here, before a score is added to a total
    except TypeError:
        return f"returned {type(scores).__name__} {_preview(scores)}, not a sequence of numbers"
    return ""


def _outside(scores: Sequence[float]) -> str:
    return _preview([s for s in scores if not 0.0 <= s <= 1.0])


def _preview(values: object) -> str:
    text = repr(values)
    return text if len(text) <= 80 else text[:77] + "..."


def _best(endpoints: Sequence[EndpointState], totals: Sequence[float]) -> ProfileResult:
    """The endpoint with the highest total (the first of equals): a failed picker's stand-in."""
    best = max(range(len(endpoints)), key=totals.__getitem__)
    return ProfileResult([endpoints[best]])


def _request_attributes(stage: Span, request: InferenceRequest) -> None:
    if request.target_model:
        stage.set_attribute("gen_ai.request.model", request.target_model)
    if request.request_id:
        stage.set_attribute("gen_ai.request.id", request.request_id)


def _scorer_attributes(stage: Span, typed_name: TypedName, weight: float, count: int, scores: Sequence[float]) -> None:
    """Who scored and a summary of the raw scores; no per-endpoint keys, so span size stays bounded."""
    stage.set_attribute("llm_d.epp.scorer.type", typed_name.type)
    stage.set_attribute("llm_d.epp.scorer.name", typed_name.name)
    stage.set_attribute("llm_d.epp.scorer.weight", float(weight))
    stage.set_attribute("llm_d.epp.scorer.candidate_endpoints", count)
    if scores:
        stage.set_attribute("llm_d.epp.scorer.score.max", float(max(scores)))
        stage.set_attribute("llm_d.epp.scorer.score.avg", float(sum(scores)) / len(scores))
        stage.set_attribute("llm_d.epp.scorer.endpoints_scored", len(scores))


def _picker_attributes(stage: Span, request: InferenceRequest, scored: Sequence[ScoredEndpoint]) -> None:
    """The candidates' count and the best few (``namespace/name``, weighted score), best first."""
    stage.set_attribute("llm_d.epp.picker.candidate_endpoints", len(scored))
    best = sorted(scored, key=lambda s: (-s.score, s.state.endpoint.key))[:_TRACED_TOP_ENDPOINTS]
    if best:
        stage.set_attribute("llm_d.epp.picker.top_endpoints", [s.state.endpoint.key for s in best])
        stage.set_attribute("llm_d.epp.picker.top_scores", [s.score for s in best])
    _request_attributes(stage, request)
