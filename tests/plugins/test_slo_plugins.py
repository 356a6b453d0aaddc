"""The SLO plugins' rules, as upstream's: the producer's headroom and validity, the tier filter, the scorer's
buckets, strategies and fallback, and the admitter's verdicts."""

from __future__ import annotations

import random
from collections.abc import Sequence

import numpy as np
import pytest
from scheduling_builders import state

from epp.framework.latency import LatencyPrediction, LatencyPredictions
from epp.framework.latency_predictor import LatencyPredicting, PredictorStats, predictor_stats
from epp.framework.plugin import NamedPlugin, Plugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.response import CompletedResponse, ResponseTiming, Usage
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins import latency_scorer, latency_slo_admitter, predicted_latency_producer, slo_headroom_tier_filter
from epp.plugins.latency_slo_admitter import REFUSAL
from epp.slo.features import Sample
from epp.slo.predictor import BulkPrediction
from epp.slo.series import SloSeries
from epp.telemetry.metrics import EppMetrics

PRODUCER = "predicted-latency-producer"


class FixedPredictor:
    """A predictor answering fixed (TTFT, TPOT) per row and keeping what it is told (a test double of the
    predictor, not of the plugin under test)."""

    def __init__(self, answers: Sequence[tuple[float, float]] | None) -> None:
        self.answers = answers
        self.samples: list[Sample] = []
        self.stats = PredictorStats(backend="fixed")

    async def predict(self, rows: np.ndarray) -> BulkPrediction | None:
        if self.answers is None:
            return None
        return BulkPrediction([a[0] for a in self.answers], [a[1] for a in self.answers])

    def observe(self, sample: Sample) -> None:
        self.samples.append(sample)

    async def aclose(self) -> None:
        return None


def _request(priority: int = 0, **headers: str) -> InferenceRequest:
    return InferenceRequest(request_id="r1", headers=headers, priority=priority, size=4000)


def _predictions(request: InferenceRequest, *infos: LatencyPrediction | None) -> list:
    states = [state(i) for i in range(len(infos))]
    request.attributes[LatencyPredictions.key(PRODUCER)] = LatencyPredictions(
        PRODUCER, 100.0, 20.0, {s.endpoint.key: info for s, info in zip(states, infos, strict=True) if info}
    )
    return states


def _info(ttft_headroom: float, tpot_headroom: float = 0.0, dispatched: int = 1) -> LatencyPrediction:
    return LatencyPrediction(
        100 - ttft_headroom,
        20 - tpot_headroom,
        ttft_headroom > 0,
        tpot_headroom >= 0,
        ttft_headroom,
        tpot_headroom,
        dispatched,
    )


def _resolved(plugin: Plugin) -> Plugin:
    producer = predicted_latency_producer.create(PRODUCER, {}, PluginContext())
    plugin.resolve_references(lambda where, name: producer if name == PRODUCER else _undefined(name))
    return plugin


def _undefined(name: str) -> Plugin:
    raise ValueError(f"undefined plugin {name!r}")


# -- predicted-latency-producer ---------------------------------------------------------------------


async def test_producer_headroom_validity_and_the_learning() -> None:
    candidates = [state(0, queue=3, kv=0.5), state(1)]
    candidates[0].in_flight_requests = 2
    fixed = FixedPredictor([(150.0, 30.0), (50.0, 10.0)])
    producer = predicted_latency_producer.PredictedLatencyProducer(PRODUCER, fixed, streaming=True)
    request = _request(**{"x-llm-d-slo-ttft-ms": "100", "x-slo-tpot-ms": "25"})  # the older TPOT spelling
    await producer.produce(request, candidates)
    predictions = LatencyPredictions.read(request, PRODUCER)
    assert predictions is not None and (predictions.ttft_slo_ms, predictions.tpot_slo_ms) == (100.0, 25.0)
    slow, fast = predictions.of(candidates[0]), predictions.of(candidates[1])
    assert slow == LatencyPrediction(150.0, 30.0, False, False, -50.0, -5.0, 2)
    assert fast == LatencyPrediction(50.0, 10.0, True, True, 50.0, 15.0, 0)

    result = SchedulingResult({"default": ProfileResult([candidates[1]])}, "default")
    producer.pre_request(CycleState(), request, result)
    # A second request on the same endpoint sees its TPOT headroom tightened to the running one's 25 ms.
    second = _request(**{"x-llm-d-slo-ttft-ms": "100", "x-llm-d-slo-tpot-ms": "40"})
    await producer.produce(second, candidates)
    assert LatencyPredictions.read(second, PRODUCER).of(candidates[1]).tpot_headroom == 15.0

    timing = ResponseTiming(routed_at=10.0, first_byte_at=10.2, ended_at=11.2)
    producer.response_complete(request, CompletedResponse(Usage(completion_tokens=11), 200, timing=timing))
    (sample,) = fixed.samples
    assert sample.ttft_ms == pytest.approx(200.0) and sample.tpot_ms == pytest.approx(100.0)
    assert sample.features.num_request_waiting == 0 and sample.features.input_token_length == 1000
    producer.post_response(request, candidates[1])
    third = _request(**{"x-llm-d-slo-ttft-ms": "100", "x-llm-d-slo-tpot-ms": "40"})
    await producer.produce(third, candidates)  # the 25 ms request is gone: 40 ms again
    assert LatencyPredictions.read(third, PRODUCER).of(candidates[1]).tpot_headroom == 30.0


async def test_producer_outside_streaming_mode_neutralises_tpot_and_learns_end_to_end() -> None:
    candidates = [state(0)]
    fixed = FixedPredictor([(50.0, 99.0)])
    producer = predicted_latency_producer.PredictedLatencyProducer(PRODUCER, fixed)
    request = _request()  # no SLO headers: every endpoint misses a TTFT objective of 0
    await producer.produce(request, candidates)
    info = LatencyPredictions.read(request, PRODUCER).of(candidates[0])
    assert info == LatencyPrediction(50.0, 99.0, False, True, -50.0, 0.0, 0)
    producer.pre_request(CycleState(), request, SchedulingResult({"default": ProfileResult(candidates)}, "default"))
    done = CompletedResponse(Usage(completion_tokens=5), 200, timing=ResponseTiming(1.0, 1.1, 1.5))
    producer.response_complete(request, done)
    assert [(s.ttft_ms, s.tpot_ms) for s in fixed.samples] == [(pytest.approx(500.0), 0.0)]
    producer.response_complete(request, CompletedResponse(Usage(), 503, timing=ResponseTiming(1.0, 1.1, 1.5)))
    assert len(fixed.samples) == 1  # an error answer teaches nothing


async def test_no_prediction_leaves_the_attribute_empty() -> None:
    producer = predicted_latency_producer.PredictedLatencyProducer(PRODUCER, FixedPredictor(None))
    request = _request(**{"x-llm-d-slo-ttft-ms": "100"})
    await producer.produce(request, [state(0)])
    assert LatencyPredictions.read(request, PRODUCER) == LatencyPredictions(PRODUCER, 100.0, 0.0, {})
    assert _scorer().source.read(request) is None  # what the SLO plugins see: nothing, so they fall back


def test_producer_parameters_are_checked() -> None:
    with pytest.raises(PluginConfigError, match="sloBufferFactor"):
        predicted_latency_producer.create(PRODUCER, {"sloBufferFactor": 0}, PluginContext())
    with pytest.raises(PluginConfigError, match="useEncoderCacheFeatures"):
        predicted_latency_producer.create(PRODUCER, {"useEncoderCacheFeatures": True}, PluginContext())
    with pytest.raises(PluginConfigError, match="backend"):
        predicted_latency_producer.create(PRODUCER, {"predictor": {"backend": "sidecar"}}, PluginContext())
    with pytest.raises(PluginConfigError, match="not an http"):
        predicted_latency_producer.create(
            PRODUCER, {"predictor": {"backend": "remote", "remote": {"trainingServerUrl": "ftp://x"}}}, PluginContext()
        )
    with pytest.raises(PluginConfigError, match="unknown field"):
        predicted_latency_producer.create(PRODUCER, {"predictor": {"embedded": {"trees": 5}}}, PluginContext())


async def test_a_reload_hands_the_predictor_over() -> None:
    old = predicted_latency_producer.create(PRODUCER, {}, PluginContext())
    new = predicted_latency_producer.create(PRODUCER, {}, PluginContext())
    kept = old.predictor
    new.inherit(old)
    assert new.predictor is kept and old.predictor is None
    other = predicted_latency_producer.create(PRODUCER, {"predictor": {"embedded": {"quantile": 0.5}}}, PluginContext())
    other.inherit(new)  # other settings: its own predictor
    assert other.predictor is not kept
    for plugin in (old, new, other):
        await plugin.aclose()


class OwnPredictorPlugin(NamedPlugin):
    """A plugin of another distribution that runs its own latency predictor: no kin of the in-tree producer."""

    plugin_type = "my-latency-predictor"
    kinds = frozenset({PluginKind.DATA_PRODUCER})

    def __init__(self, name: str, stats: PredictorStats) -> None:
        super().__init__(name)
        self.stats = stats

    def predictor_stats(self) -> PredictorStats | None:
        return self.stats


async def test_metrics_mirror_every_plugin_holding_a_predictor_by_its_capability() -> None:
    in_tree = predicted_latency_producer.PredictedLatencyProducer(PRODUCER, FixedPredictor(None))
    own = OwnPredictorPlugin("mine", PredictorStats(backend="mine", predictions=3, training_runs=2))
    scorer = _scorer()  # holds no predictor
    assert isinstance(own, LatencyPredicting) and not isinstance(scorer, LatencyPredicting)
    assert in_tree.predictor is not None
    plugins = [in_tree, scorer, own]
    assert list(predictor_stats(plugins)) == [(PRODUCER, in_tree.predictor.stats), ("mine", own.stats)]
    metrics = EppMetrics()
    metrics.series(SloSeries).mirror(predictor_stats(plugins))  # what refresh_gauges does before a scrape
    value = metrics.registry.get_sample_value
    assert value("epp_latency_predictor_predictions_total", {"plugin_name": "mine"}) == 3
    assert value("epp_latency_predictor_training_runs_total", {"plugin_name": "mine", "result": "success"}) == 2
    assert value("epp_latency_predictor_predictions_total", {"plugin_name": PRODUCER}) == 0
    await in_tree.aclose()  # it holds none now: not asked
    assert list(predictor_stats(plugins)) == [("mine", own.stats)]


# -- slo-headroom-tier-filter -------------------------------------------------------------------------


def test_tier_filter_keeps_the_positive_tier_and_explores_the_negative_one() -> None:
    request = _request()
    states = _predictions(request, _info(10), _info(-5), None)
    never = _resolved(slo_headroom_tier_filter.SloHeadroomTierFilter("f", _source(), epsilon=0.0, rng=random.Random(1)))
    assert never.filter(CycleState(), request, states) == [states[0]]
    always = slo_headroom_tier_filter.SloHeadroomTierFilter("f", _source(), epsilon=1.0, rng=random.Random(1))
    assert always.filter(CycleState(), request, states) == [states[1], states[2]]  # no prediction: negative
    only_negative = _request()
    negatives = _predictions(only_negative, _info(-1), _info(-5))
    assert never.filter(CycleState(), only_negative, negatives) == negatives
    bare = _request()
    plain = [state(0), state(1)]
    assert never.filter(CycleState(), bare, plain) == plain


def test_tier_filter_explores_about_one_percent() -> None:
    request = _request()
    states = _predictions(request, _info(10), _info(-5))
    flt = slo_headroom_tier_filter.create("f", {}, PluginContext(seed=3))
    picks = [flt.filter(CycleState(), request, states)[0] for _ in range(20000)]
    share = sum(p is states[1] for p in picks) / len(picks)
    assert 0.005 < share < 0.015


def _source() -> latency_scorer.LatencySource:
    from epp.framework.params import Params

    return latency_scorer.LatencySource("t", Params("t", {}))


# -- latency-scorer --------------------------------------------------------------------------------


def _scorer(**parameters: object) -> latency_scorer.LatencyScorer:
    scorer = latency_scorer.create("s", parameters, PluginContext())
    producer = predicted_latency_producer.create(PRODUCER, {}, PluginContext())
    scorer.resolve_references(lambda where, name: producer if name == PRODUCER else _undefined(name))
    return scorer


def test_scorer_least_packs_and_most_spreads_among_the_positive() -> None:
    request = _request()
    states = _predictions(request, _info(10), _info(50), _info(-5))
    least = _scorer().score(CycleState(), request, states)
    assert least == [1.0, 0.01, 0.0]  # TTFT spread only: all weight on TTFT; the negative gets 0
    most = _scorer(headroomSelectionStrategy="most").score(CycleState(), request, states)
    assert most == [0.01, 1.0, 0.0]


def test_scorer_all_negative_prefers_idle_then_the_mildest_bucket() -> None:
    request = _request()
    states = _predictions(request, _info(-10, dispatched=3), _info(-50, dispatched=0))
    assert _scorer().score(CycleState(), request, states) == [0.0, 0.51]  # the idle one alone, flat → 0.5
    busy = _request()
    states = _predictions(busy, _info(-10, -1, 2), _info(5, -3, 2), _info(-20, 0, 2))
    # TPOT-only negative (the second) beats TTFT-only negatives: only it is scored
    assert _scorer().score(CycleState(), busy, states) == [0.0, 0.51, 0.0]


def test_scorer_falls_back_to_the_composite_without_predictions() -> None:
    states = [state(0, queue=4, kv=0.5), state(1, queue=0, kv=0.1)]
    scores = _scorer().score(CycleState(), _request(), states)
    assert scores == [round((0.5 + 0.0) / 3, 2), round((0.9 + 1.0) / 3, 2)]


# -- latency-slo-admitter -----------------------------------------------------------------------------


def _admitter() -> latency_slo_admitter.LatencySloAdmitter:
    admitter = latency_slo_admitter.create("a", {}, PluginContext())
    producer = predicted_latency_producer.create(PRODUCER, {}, PluginContext())
    admitter.resolve_references(lambda where, name: producer if name == PRODUCER else _undefined(name))
    return admitter


def _busy(i: int, kv: float = 0.5, running: int = 3):
    from dataclasses import replace

    s = state(i, kv=kv)
    s.metrics = replace(s.metrics, running=running)
    return s


@pytest.mark.parametrize(
    ("priority", "headers", "states", "infos", "denied"),
    [
        (-1, {"x-llm-d-slo-ttft-ms": "100"}, [_busy(0), _busy(1)], [_info(-5), _info(-1)], True),
        (0, {"x-llm-d-slo-ttft-ms": "100"}, [_busy(0), _busy(1)], [_info(-5), _info(-1)], False),  # not sheddable
        (-1, {}, [_busy(0), _busy(1)], [_info(-5), _info(-1)], False),  # no objective
        (-1, {"x-slo-tpot-ms": "9"}, [_busy(0), _busy(1)], [_info(-5), _info(1)], False),  # one is valid
        (-1, {"x-llm-d-slo-ttft-ms": "100"}, [_busy(0), _busy(1, kv=0.01)], [_info(-5), _info(-1)], False),  # cold
        (-1, {"x-llm-d-slo-ttft-ms": "100"}, [_busy(0), _busy(1, running=0)], [_info(-5), _info(-1)], False),  # idle
        (-1, {"x-llm-d-slo-ttft-ms": "100"}, [_busy(0), _busy(1)], [None, None], False),  # no predictions
    ],
)
def test_admitter_verdicts(priority: int, headers: dict[str, str], states: list, infos: list, denied: bool) -> None:
    request = _request(priority, **headers)
    request.attributes[LatencyPredictions.key(PRODUCER)] = LatencyPredictions(
        PRODUCER, 100.0, 0.0, {s.endpoint.key: i for s, i in zip(states, infos, strict=True) if i}
    )
    assert _admitter().admit(request, states) == (REFUSAL if denied else None)
    assert str(REFUSAL) == "no valid endpoint available to serve the request"


def test_slo_plugins_refuse_a_configuration_without_the_producer() -> None:
    for module in (latency_scorer, slo_headroom_tier_filter, latency_slo_admitter):
        plugin = module.create("p", {}, PluginContext())
        with pytest.raises(PluginConfigError, match="declare a predicted-latency-producer"):
            plugin.resolve_references(lambda where, name: _undefined(name))
