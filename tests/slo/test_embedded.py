"""The embedded predictor: trains on its worker thread, learns a p90 within 25% on held-out samples, and keeps
its models and samples in its state file across a restart."""

from __future__ import annotations

import random
import threading
from pathlib import Path

import numpy as np
import pytest

from epp.slo.embedded import EmbeddedPredictor, EmbeddedSettings
from epp.slo.features import Features, Sample, matrix
from epp_sim.waits import wait_until


def _features(rng: random.Random) -> Features:
    return Features(
        kv_cache_percentage=rng.random(),
        input_token_length=rng.randint(50, 4000),
        num_request_waiting=rng.choice((0, 0, 1, 2, 5, 9)),
        num_request_running=rng.randint(0, 60),
        prefix_cache_score=rng.random() * 0.5,
        prefill_tokens_in_flight=rng.randint(0, 20000),
    )


def _rows(features: list[Features]) -> np.ndarray:
    return matrix([f.row() for f in features])


def _sample(rng: random.Random) -> Sample:
    """TTFT grows with the queue and the uncached prompt, TPOT with the running batch; log-normal noise."""
    f = _features(rng)
    ttft = (30 * f.num_request_waiting + 0.05 * (1 - f.prefix_cache_score) * f.input_token_length + 10) * (
        rng.lognormvariate(0, 0.25)
    )
    tpot = (10 + 0.1 * f.num_request_running) * rng.lognormvariate(0, 0.1)
    return Sample(f, ttft, tpot)


async def test_trains_off_the_loop_and_learns_the_p90() -> None:
    rng = random.Random(7)
    predictor = EmbeddedPredictor(EmbeddedSettings(retrain_interval=3600), seed=7)
    try:
        assert await predictor.predict(_rows([_features(rng)])) is None  # no model yet: the plugins fall back
        for _ in range(4000):
            predictor.observe(_sample(rng))
        loop_thread = threading.current_thread().name
        assert await predictor.train_now()
        stats = predictor.stats
        assert stats.training_thread.startswith("epp-latency-train")
        assert stats.training_thread != loop_thread
        assert stats.training_runs == 1 and stats.model_ready
        for target in ("ttft", "tpot"):
            quality = stats.quality[target]
            assert quality.samples >= 300
            assert quality.error < 0.25, (target, quality)
            assert 0.8 < quality.coverage < 0.97, (target, quality)
        rows = [_features(rng) for _ in range(32)]
        prediction = await predictor.predict(_rows(rows))
        assert prediction is not None and len(prediction.ttft_ms) == len(prediction.tpot_ms) == 32
        queued = Features(0.5, 1000, 9, 10, 0.0, 0)
        idle = Features(0.5, 1000, 0, 10, 0.0, 0)
        both = await predictor.predict(_rows([queued, idle]))
        assert both is not None and both.ttft_ms[0] > 3 * both.ttft_ms[1]  # the queue is learnt
        assert not await predictor.train_now()  # nothing new: no run
    finally:
        await predictor.aclose()


async def test_state_survives_a_restart(tmp_path: Path) -> None:
    state = tmp_path / "predictor.npz"
    rng = random.Random(3)
    first = EmbeddedPredictor(EmbeddedSettings(retrain_interval=3600, state_file=str(state)), seed=3)
    rows = [_features(rng) for _ in range(8)]
    for _ in range(500):
        first.observe(_sample(rng))
    assert await first.train_now()
    before = await first.predict(_rows(rows))
    await first.aclose()
    assert state.exists()

    second = EmbeddedPredictor(EmbeddedSettings(retrain_interval=3600, state_file=str(state)), seed=3)
    try:
        assert await second.predict(_rows(rows)) is None  # loading starts with the first use, off the loop

        async def loaded() -> bool:
            return await second.predict(_rows(rows)) is not None

        await wait_until(loaded, timeout=30, message="the state file loaded")
        assert await second.predict(_rows(rows)) == before
        assert second.stats.samples == first.stats.samples
    finally:
        await second.aclose()


async def test_a_bad_state_file_starts_cold(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    state = tmp_path / "predictor.npz"
    state.write_bytes(b"not a state file")
    predictor = EmbeddedPredictor(EmbeddedSettings(retrain_interval=3600, state_file=str(state)))
    try:
        assert await predictor.predict(_rows([_features(random.Random(1))])) is None
        await wait_until(
            lambda: any("not loaded" in r.getMessage() for r in caplog.records),
            timeout=30,
            message="the refusal logged",
        )
        assert any("starting cold" in r.getMessage() for r in caplog.records)
        assert not predictor.stats.model_ready
    finally:
        await predictor.aclose()
