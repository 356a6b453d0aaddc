"""The remote predictor speaks upstream's sidecar APIs (against epp-sim's stand-in of them): bulk predictions
per request, samples flushed in bulk, and every failure a fall-back, never an error."""

from __future__ import annotations

import numpy as np

from epp.slo.features import Features, Sample, matrix
from epp.slo.remote import RemotePredictor, RemoteSettings
from epp_sim.latency_predictor import LatencyPredictorServer


def _rows(*features: Features) -> np.ndarray:
    return matrix([f.row() for f in features])


def _features(waiting: int) -> Features:
    return Features(0.4, 300, waiting, 2, 0.25, 1200, "decode")


async def test_predicts_in_bulk_and_sends_samples() -> None:
    async with LatencyPredictorServer() as server:
        settings = RemoteSettings(training_url=server.url, prediction_urls=(server.url,), flush_interval=3600)
        predictor = RemotePredictor(settings, seed=1)
        try:
            assert await predictor.predict(_rows(_features(0))) is None  # 503 until the server has a model
            assert predictor.stats.prediction_failures == 1
            for i in range(10):
                predictor.observe(Sample(_features(0), 20.0 + i, 5.0))
                predictor.observe(Sample(_features(4), 200.0 + i, 0.0))
            assert await predictor.flush()
            assert len(server.samples) == 20 and predictor.stats.samples_sent == 20
            sent = server.samples[0]
            assert (sent["num_tokens_generated"], sent["pod_type"], sent["prefill_tokens_in_flight"]) == (
                0,
                "decode",
                1200,
            )
            bulk = await predictor.predict(_rows(_features(0), _features(4)))
            assert bulk is not None
            assert bulk.ttft_ms[0] == 29.0 and bulk.ttft_ms[1] == 209.0 and bulk.tpot_ms[0] == 5.0
            assert predictor.stats.predictions == 1
            too_many = [_features(0)] * (settings.max_bulk_size + 1)
            calls = server.prediction_calls
            assert (
                await predictor.predict(_rows(*too_many)) is None and server.prediction_calls == calls
            )  # no call made
        finally:
            await predictor.aclose()


async def test_an_unreachable_server_is_a_fall_back() -> None:
    async with LatencyPredictorServer() as server:
        url = server.url
    predictor = RemotePredictor(
        RemoteSettings(training_url=url, prediction_urls=(url,), timeout=2, flush_interval=3600)
    )
    try:
        assert await predictor.predict(_rows(_features(0))) is None
        predictor.observe(Sample(_features(0), 10.0, 0.0))
        assert not await predictor.flush()
        assert predictor.stats.prediction_failures == 1 and predictor.stats.training_failures == 1
    finally:
        await predictor.aclose()


def test_settings_from_upstreams_environment() -> None:
    env = {
        "TRAINING_SERVER_URL": "http://train:8000",
        "PREDICTION_SERVER_URL": "http://p1:8001, http://p2:8001",
        "LATENCY_MAX_BULK_SIZE": "500",
        "LATENCY_FLUSH_INTERVAL_SEC": "2",
    }
    settings = RemoteSettings.from_environment(env)
    assert settings.prediction_urls == ("http://p1:8001", "http://p2:8001")
    assert (settings.training_url, settings.max_bulk_size, settings.flush_interval) == ("http://train:8000", 100, 2.0)
    try:
        RemoteSettings.from_environment({"LATENCY_HTTP_TIMEOUT_SEC": "soon"})
    except ValueError as e:
        assert "LATENCY_HTTP_TIMEOUT_SEC" in str(e)
    else:
        raise AssertionError("a bad LATENCY_HTTP_TIMEOUT_SEC was accepted")
