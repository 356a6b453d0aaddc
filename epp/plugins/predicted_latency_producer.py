"""predicted-latency-producer: predicted TTFT and TPOT per candidate, headroom to the request's SLOs, and the learning.

The llm-d router's ``requestcontrol/dataproducer/predictedlatency``, with its parameters and hooks:

- **produce** (before admission plugins and scheduling): the request's objectives (``x-llm-d-slo-ttft-ms``,
  ``x-llm-d-slo-tpot-ms``, or the older ``x-slo-*``; none = 0), one feature row per candidate
  (``epp/slo/features.py``: KV use, input tokens, waiting queue, this picker's in-flight requests
  and tokens there, the prefix-cache score, the pod's role) and one batched prediction for all of
  them; each candidate gets ``LatencyPredictionInfo`` (``epp/framework/latency.py``):
  ``ttftHeadroom = SLO − predicted`` and, in ``streamingMode``, the TPOT headroom against
  ``SLO × sloBufferFactor``, tightened to the smallest TPOT objective among the requests this picker
  has running there; outside ``streamingMode``, or on an endpoint whose ``endpointRoleLabel`` value
  is ``prefill``, TPOT is neutral (valid, headroom 0). No prediction (no model yet, the predictor
  failed) leaves the attribute empty (upstream writes none), and the SLO plugins fall back;
- **PreRequest**: the request joins its endpoint's running requests (and its prefill endpoint, from
  a profile named ``prefill``, is noted);
- **ResponseStreaming** (the response is complete, status 200): the sample. TTFT = the first
  response byte after the routing answer (``streamingMode``) or the whole response (not
  streaming: upstream's end-to-end "TTFT"), with the features of the endpoint that did the prefill;
  TPOT (``streamingMode``) = (end − first byte) / (completion tokens − 1) from the response's usage,
  with the decode endpoint's features;
- **PostResponse** (however the request ended): it leaves the running requests.

The predictor is the embedded one (default; ``epp/slo/embedded.py``) or upstream's sidecars
(``predictor.backend: remote``; ``epp/slo/remote.py``), both behind one interface; it outlives a
configuration reload (``inherit``) when its settings are unchanged. Per-request state lives in the
request's attributes and dies with it, so upstream's ``contextTTL`` is accepted with no effect.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from epp.framework import headers
from epp.framework.data import DataScope, Dependencies
from epp.framework.endpoint import EndpointState
from epp.framework.latency import LatencyPrediction, LatencyPredictions, slo_ms
from epp.framework.latency_predictor import PredictorStats
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.response import CompletedResponse
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.plugins._prefix_match import PrefixMatchReader
from epp.slo.embedded import EmbeddedPredictor, EmbeddedSettings
from epp.slo.features import Features, Sample, candidate_rows
from epp.slo.predictor import NO_RECORDING, BulkPrediction, LatencyRecorder, Observation, Predictor
from epp.slo.remote import RemotePredictor, RemoteSettings

__all__ = ["TYPE", "PredictedLatencyProducer", "create"]

TYPE = "predicted-latency-producer"
PREFILL_PROFILE = "prefill"
"""The profile whose pick did the prefill (upstream hard-codes the name too)."""
_BYTES_PER_TOKEN = 4
log = logging.getLogger(__name__)


@dataclass(slots=True)
class _Request:
    """What the producer keeps of one request, in the request's attributes: the candidates' feature rows and
    each endpoint key's row."""

    ttft_slo: float
    tpot_slo: float
    rows: npt.NDArray[np.float64]
    index: dict[str, int]
    predictions: LatencyPredictions | None = None
    target: str = ""
    prefill: str = ""
    running_on: str = ""

    def features(self, key: str) -> Features | None:
        """What endpoint ``key`` looked like when the request was predicted (None: not a candidate)."""
        i = self.index.get(key)
        return None if i is None else Features.from_row(self.rows[i])


@dataclass(slots=True)
class _RunningSlos:
    """The TPOT objectives of the requests this picker has running on one endpoint; the smallest positive one."""

    slos: dict[str, float] = field(default_factory=dict)
    _min: float | None = None

    def add(self, request_id: str, slo: float) -> None:
        self.slos[request_id] = slo
        if self._min is not None and 0 < slo < self._min:
            self._min = slo

    def remove(self, request_id: str) -> None:
        if self.slos.pop(request_id, 0.0) > 0:
            self._min = None

    def smallest(self) -> float:
        if self._min is None:
            self._min = min((s for s in self.slos.values() if s > 0), default=0.0)
        return self._min


class PredictedLatencyProducer(NamedPlugin):
    """DataProducer + PreRequest + ResponseStreaming + PostResponse; see the module docstring."""

    plugin_type = TYPE
    kinds = frozenset(
        {PluginKind.DATA_PRODUCER, PluginKind.PRE_REQUEST, PluginKind.RESPONSE_STREAMING, PluginKind.POST_RESPONSE}
    )

    def __init__(
        self,
        name: str,
        predictor: Predictor,
        *,
        settings: object = None,
        buffer_factor: float = 1.0,
        streaming: bool = False,
        role_label: str = "",
        predict: bool = True,
        prefix: PrefixMatchReader | None = None,
        recorder: LatencyRecorder = NO_RECORDING,
    ) -> None:
        super().__init__(name)
        self.predictor: Predictor | None = predictor
        self.settings = settings
        """The predictor's settings: a successor with equal ones takes the predictor over on a reload."""
        self.buffer_factor = buffer_factor
        self.streaming = streaming
        self.role_label = role_label
        self.predict_in_produce = predict
        self._prefix = prefix
        self._recorder = recorder
        self._running: dict[str, _RunningSlos] = {}
        self._state_key = f"predicted-latency/{name}"

    # -- lifecycle ---------------------------------------------------------------------------------

    def consumes(self) -> Dependencies:
        # Optional: with no prefix-match producer in the configuration the score is 0, as upstream's.
        return self._prefix.dependencies(optional=True) if self._prefix is not None else Dependencies()

    def bind_data_scope(self, scope: DataScope) -> None:
        if self._prefix is not None:
            self._prefix.scope = scope

    def inherit(self, previous: Plugin) -> None:
        """A reload: keep the predictor (its models and samples) and the running requests when the settings match."""
        if not isinstance(previous, PredictedLatencyProducer) or previous.settings != self.settings:
            return
        predictor, previous.predictor = previous.predictor, None
        if predictor is not None:
            self.predictor = predictor  # this instance's own is unused yet: it holds nothing until first used
        self._running = previous._running

    def predictor_stats(self) -> PredictorStats | None:
        """``LatencyPredicting``: the counts /metrics mirrors at each scrape."""
        return self.predictor.stats if self.predictor is not None else None

    async def aclose(self) -> None:
        predictor, self.predictor = self.predictor, None
        if predictor is not None:
            await predictor.aclose()

    # -- produce -----------------------------------------------------------------------------------

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        ttft_slo = slo_ms(request.headers, headers.TTFT_SLO)
        tpot_slo = slo_ms(request.headers, headers.TPOT_SLO)
        rows = self.rows(request, candidates)
        state = _Request(ttft_slo, tpot_slo, rows, {s.endpoint.key: i for i, s in enumerate(candidates)})
        request.attributes[self._state_key] = state
        predictor = self.predictor
        if not self.predict_in_produce or predictor is None or not candidates:
            return
        predictions = LatencyPredictions(self.typed_name.name, ttft_slo, tpot_slo)
        request.attributes[LatencyPredictions.key(self.typed_name.name)] = predictions  # empty: the readers fall back
        start = time.perf_counter()
        bulk = await predictor.predict(rows)
        self._recorder.predicted(self.typed_name, request, time.perf_counter() - start)
        if bulk is None or len(bulk.ttft_ms) != len(candidates):
            return
        predictions.by_endpoint = self._judge(candidates, bulk, state)
        state.predictions = predictions

    def rows(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> npt.NDArray[np.float64]:
        """The candidates' feature rows (``epp/slo/features.py``), built a column at a time."""
        scores: Sequence[float] = [0.0] * len(candidates)
        prefix = self._prefix
        if prefix is not None and candidates:
            info = prefix.match(request, candidates)
            if info is not None and info.total_blocks > 0:
                scores = [min(m / info.total_blocks, 1.0) for m in info.match_blocks]
        label = self.role_label
        return candidate_rows(
            kv_cache=[s.metrics.kv_cache_usage for s in candidates],
            input_tokens=len(request.token_ids) if request.token_ids is not None else request.size // _BYTES_PER_TOKEN,
            waiting=[s.metrics.waiting_queue for s in candidates],
            running=[s.in_flight_requests for s in candidates],
            prefix=scores,
            in_flight_tokens=[s.in_flight_tokens for s in candidates],
            pod_types=[s.endpoint.labels.get(label, "") for s in candidates] if label else [""] * len(candidates),
        )

    def _judge(
        self, candidates: Sequence[EndpointState], bulk: BulkPrediction, state: _Request
    ) -> dict[str, LatencyPrediction]:
        """Upstream's validity and headroom per candidate (``prediction.go``)."""
        out: dict[str, LatencyPrediction] = {}
        factor = self.buffer_factor
        for candidate, ttft, tpot in zip(candidates, bulk.ttft_ms, bulk.tpot_ms, strict=True):
            key = candidate.endpoint.key
            tpot_valid, tpot_headroom = True, 0.0
            if self.streaming and not self._prefill_role(candidate):
                buffered = state.tpot_slo * factor
                running = self._running.get(key)
                smallest = running.smallest() if running is not None else 0.0
                if smallest > 0:
                    buffered = min(buffered, smallest * factor)
                tpot_valid, tpot_headroom = tpot < buffered, buffered - tpot
            out[key] = LatencyPrediction(
                ttft_ms=ttft,
                tpot_ms=tpot,
                ttft_valid=ttft < state.ttft_slo,
                tpot_valid=tpot_valid,
                ttft_headroom=state.ttft_slo - ttft,
                tpot_headroom=tpot_headroom,
                dispatched=candidate.in_flight_requests,
            )
        return out

    def _prefill_role(self, state: EndpointState) -> bool:
        return bool(self.role_label) and state.endpoint.labels.get(self.role_label) == "prefill"

    # -- the request's life ------------------------------------------------------------------------

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        state = request.attributes.get(self._state_key)
        if not isinstance(state, _Request):
            return
        target = result.primary.targets[0].endpoint.key
        state.target = target
        prefill = result.profile_results.get(PREFILL_PROFILE)
        if prefill is not None and prefill.targets and result.primary_profile != PREFILL_PROFILE:
            state.prefill = prefill.targets[0].endpoint.key
        running = self._running.get(target)
        if running is None:
            running = self._running[target] = _RunningSlos()
        running.add(request.request_id, state.tpot_slo)
        state.running_on = target

    def response_complete(self, request: InferenceRequest, response: CompletedResponse) -> None:
        state = request.attributes.get(self._state_key)
        timing = response.timing
        if not isinstance(state, _Request) or not state.target or timing is None or response.status != 200:
            return
        if self.streaming:
            if timing.first_byte_at is None:
                return
            ttft = (timing.first_byte_at - timing.routed_at) * 1000
            tokens = response.usage.completion_tokens
            tpot = (timing.ended_at - timing.first_byte_at) * 1000 / (tokens - 1) if tokens > 1 else 0.0
        else:
            ttft, tpot = (timing.ended_at - timing.routed_at) * 1000, 0.0
        self._learn(state, ttft, tpot)
        predicted = state.predictions.by_endpoint.get(state.prefill or state.target) if state.predictions else None
        decoded = state.predictions.by_endpoint.get(state.target) if state.predictions else None
        self._recorder.observed(
            self.typed_name,
            request,
            Observation(
                ttft_ms=ttft,
                tpot_ms=tpot,
                predicted_ttft_ms=predicted.ttft_ms if predicted is not None else 0.0,
                predicted_tpot_ms=decoded.tpot_ms if decoded is not None else 0.0,
                ttft_slo_ms=state.ttft_slo,
                tpot_slo_ms=state.tpot_slo,
            ),
        )

    def _learn(self, state: _Request, ttft: float, tpot: float) -> None:
        predictor = self.predictor
        if predictor is None:
            return
        decode = state.features(state.target)
        prefill = state.features(state.prefill) if state.prefill else None
        if prefill is not None:
            if ttft > 0:
                predictor.observe(Sample(prefill, ttft, 0.0))
            if decode is not None and tpot > 0:
                predictor.observe(Sample(decode, 0.0, tpot))
        elif decode is not None and (ttft > 0 or tpot > 0):
            predictor.observe(Sample(decode, max(ttft, 0.0), tpot))

    def post_response(self, request: InferenceRequest, endpoint: EndpointState | None) -> None:
        state = request.attributes.get(self._state_key)
        if isinstance(state, _Request) and state.running_on:
            running = self._running.get(state.running_on)
            if running is not None:
                running.remove(request.request_id)
                if not running.slos:
                    del self._running[state.running_on]
            state.running_on = ""


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> PredictedLatencyProducer:
    """Factory: upstream's parameters, and ``predictor`` (ours) for the back-end."""
    p = Params(TYPE, parameters)
    where = f"{TYPE}.parameters"
    factor = p.number("sloBufferFactor", 1.0, minimum=0.0, exclusive_minimum=True)
    streaming = p.boolean("streamingMode", False)
    role_label = p.text("endpointRoleLabel") or ""
    predict = p.boolean("predictInProduce", True)
    for unused in ("contextTTL", "samplingMean", "maxDecodeTokenSamplesForPrediction", "inFlightLoadProducerName"):
        if p.present(unused):
            log.warning(
                "plugin parameter has no effect here",
                extra={
                    "setting": f"{where}.{unused}",
                    "reason": "per-request state lives with the request; one in-flight count per endpoint; "
                    "samplingMean and maxDecodeTokenSamplesForPrediction are ignored upstream too",
                },
            )
    if p.boolean("useEncoderCacheFeatures", False):
        raise PluginConfigError(
            f"{where}.useEncoderCacheFeatures: multimodal encoder-cache features need upstream's encoder-cache "
            "producer, which this picker does not have; leave it false"
        )
    p.text("encoderCacheMatchInfoProducerName")
    prefix = PrefixMatchReader(p)
    predictor_params = p.nested("predictor")
    p.done()
    settings, predictor = _predictor(predictor_params, context, where)
    recorder: LatencyRecorder = context.extras.get("latency_recorder", NO_RECORDING)
    return PredictedLatencyProducer(
        name,
        predictor,
        settings=settings,
        buffer_factor=factor,
        streaming=streaming,
        role_label=role_label,
        predict=predict,
        prefix=prefix,
        recorder=recorder,
    )


def _predictor(p: Params | None, context: PluginContext, where: str) -> tuple[object, Predictor]:
    """The back-end ``predictor`` names: ``embedded`` (default) or ``remote``."""
    backend = p.choice("backend", "embedded", ("embedded", "remote")) if p is not None else "embedded"
    if backend == "remote":
        assert p is not None
        try:
            defaults = RemoteSettings.from_environment(os.environ)
        except ValueError as e:
            raise PluginConfigError(f"{where}.predictor: {e}") from None
        remote = p.nested("remote")
        settings = defaults
        if remote is not None:
            urls = remote.text("predictionServerUrls")
            settings = RemoteSettings(
                training_url=remote.string("trainingServerUrl", defaults.training_url),
                prediction_urls=tuple(u.strip() for u in urls.split(",") if u.strip())
                if urls
                else defaults.prediction_urls,
                timeout=remote.duration("timeout", defaults.timeout),
                flush_interval=remote.duration("flushInterval", defaults.flush_interval),
                max_sample_size=remote.integer("maxSampleSize", defaults.max_sample_size, minimum=1),
                max_bulk_size=min(100, remote.integer("maxBulkSize", defaults.max_bulk_size, minimum=1)),
            )
            remote.done()
        for url in (settings.training_url, *settings.prediction_urls):
            if not url.startswith(("http://", "https://")):
                raise PluginConfigError(f"{where}.predictor.remote: {url!r} is not an http(s) URL")
        if p.present("embedded"):
            raise PluginConfigError(f"{where}.predictor.embedded: set only with backend: embedded")
        p.done()
        return settings, RemotePredictor(settings, seed=context.seed)
    embedded = p.nested("embedded") if p is not None else None
    base = EmbeddedSettings()
    own = base
    if embedded is not None:
        own = EmbeddedSettings(
            objective=embedded.choice("objective", "quantile", ("quantile", "mean")),
            quantile=embedded.number("quantile", 0.9, minimum=0.0, maximum=1.0, exclusive_minimum=True),
            retrain_interval=embedded.duration("retrainInterval", base.retrain_interval),
            min_samples=embedded.integer("minSamplesForRetrain", base.min_samples, minimum=1),
            min_samples_fresh=embedded.integer("minSamplesForRetrainFresh", base.min_samples_fresh, minimum=1),
            per_bucket=embedded.integer("maxSamplesPerBucket", base.per_bucket, minimum=1),
            state_file=embedded.text("stateFile") or "",
        )
        embedded.done()
    if p is not None:
        if p.present("remote"):
            raise PluginConfigError(f"{where}.predictor.remote: set only with backend: remote")
        p.done()
    return own, EmbeddedPredictor(own, seed=context.seed)
