"""The remote latency predictor: upstream's training and prediction servers (llm-d-latency-predictor), over HTTP.

For an operator who keeps the llm-d predictor sidecars. What upstream's client
(``latencypredictorclient``) does, with its defaults (``TRAINING_SERVER_URL``,
``PREDICTION_SERVER_URL``, ``LATENCY_MAX_SAMPLE_SIZE``, ``LATENCY_FLUSH_INTERVAL_SEC``,
``LATENCY_HTTP_TIMEOUT_SEC``, ``LATENCY_MAX_BULK_SIZE``, read from the environment unless the
configuration sets them):

- a request's candidates are one ``POST {prediction}/predict/bulk/strict`` (``{"requests": [...]}``;
  one of the prediction URLs at random per call); more than ``max_bulk_size`` candidates, an error,
  a timeout or a count that does not match get no predictions (the SLO plugins fall back);
- samples are queued and sent every ``flush_interval`` as ``POST {training}/add_training_data_bulk``
  (``{"entries": [...]}``, 202 expected), at most ``max_sample_size`` per flush, randomly chosen.

Rows carry upstream's fields: tokens generated 1 when predicting and 0 in training, in-flight decode
tokens and encoder sizes 0. Upstream's request coalescing (``LATENCY_COALESCE_WINDOW_MS``) is not
done: each request makes its own call.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import orjson

from epp.framework.latency_predictor import PredictorStats
from epp.slo.features import Features, Sample
from epp.slo.predictor import BulkPrediction
from epp.tasks import cancel_and_wait, start_guarded

__all__ = ["RemotePredictor", "RemoteSettings", "prediction_row"]

log = logging.getLogger(__name__)

_MAX_PENDING = 100_000  # samples waiting for a flush; past this the oldest are dropped


@dataclass(frozen=True, slots=True)
class RemoteSettings:
    """Where upstream's servers are and how the client talks to them (upstream's env defaults)."""

    training_url: str = "http://localhost:8000"
    prediction_urls: tuple[str, ...] = field(default=("http://localhost:8001",))
    timeout: float = 10.0
    flush_interval: float = 1.0
    max_sample_size: int = 1000
    max_bulk_size: int = 100

    @staticmethod
    def from_environment(env: Mapping[str, str]) -> RemoteSettings:
        """Upstream's environment variables (ValueError naming one that does not parse)."""

        def number(name: str, default: float) -> float:
            raw = env.get(name)
            if not raw:
                return default
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{name}: must be a number, got {raw!r}") from None
            if value <= 0:
                raise ValueError(f"{name}: must be > 0, got {raw!r}")
            return value

        listed = env.get("PREDICTION_SERVER_URL", "http://localhost:8001").split(",")
        urls = tuple(u.strip() for u in listed if u.strip())
        return RemoteSettings(
            training_url=env.get("TRAINING_SERVER_URL") or "http://localhost:8000",
            prediction_urls=urls or ("http://localhost:8001",),
            timeout=number("LATENCY_HTTP_TIMEOUT_SEC", 10.0),
            flush_interval=number("LATENCY_FLUSH_INTERVAL_SEC", 1.0),
            max_sample_size=int(number("LATENCY_MAX_SAMPLE_SIZE", 1000)),
            max_bulk_size=min(100, int(number("LATENCY_MAX_BULK_SIZE", 100))),
        )


def prediction_row(features: Features, *, tokens_generated: int) -> dict[str, Any]:
    """One row of upstream's prediction request (``PredictionRequest``)."""
    return {
        "kv_cache_percentage": min(max(features.kv_cache_percentage, 0.0), 1.0),
        "input_token_length": features.input_token_length,
        "num_request_waiting": features.num_request_waiting,
        "num_request_running": features.num_request_running,
        "num_tokens_generated": tokens_generated,
        "prefix_cache_score": min(max(features.prefix_cache_score, 0.0), 1.0),
        "pod_type": features.pod_type,
        "prefill_tokens_in_flight": features.prefill_tokens_in_flight,
        "decode_tokens_in_flight": 0,
        "encoder_matched_size": 0,
        "encoder_input_size": 0,
    }


class RemotePredictor:
    """Upstream's sidecars behind the :class:`~epp.slo.predictor.Predictor` interface."""

    def __init__(self, settings: RemoteSettings, *, seed: int | None = None) -> None:
        self.settings = settings
        self._rng = random.Random(seed)
        self._client: httpx.AsyncClient | None = None
        self._pending: list[dict[str, Any]] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        self.stats = PredictorStats(backend="remote")

    def _http(self) -> httpx.AsyncClient:
        client = self._client
        if client is None:
            client = self._client = httpx.AsyncClient(timeout=self.settings.timeout)
        return client

    async def predict(self, rows: npt.NDArray[np.float64]) -> BulkPrediction | None:
        self._start()
        features = [Features.from_row(row) for row in rows]
        if not features:
            return None
        if len(features) > self.settings.max_bulk_size:
            self.stats.prediction_failures += 1
            return None
        url = self._rng.choice(self.settings.prediction_urls) + "/predict/bulk/strict"
        body = orjson.dumps({"requests": [prediction_row(f, tokens_generated=1) for f in features]})
        try:
            response = await self._http().post(url, content=body, headers={"content-type": "application/json"})
            if response.status_code != 200:
                raise ValueError(f"{url} answered {response.status_code}: {response.text[:200]}")
            predictions = orjson.loads(response.content)["predictions"]
            if len(predictions) != len(features):
                raise ValueError(f"{url} returned {len(predictions)} predictions for {len(features)} rows")
            ttft = [float(p["ttft_ms"]) for p in predictions]
            tpot = [float(p["tpot_ms"]) for p in predictions]
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as e:
            self.stats.prediction_failures += 1
            log.debug("remote latency prediction failed", extra={"error": f"{type(e).__name__}: {e}"})
            return None
        self.stats.predictions += 1
        self.stats.model_ready = True
        return BulkPrediction(ttft, tpot)

    def observe(self, sample: Sample) -> None:
        self._start()
        entry = prediction_row(sample.features, tokens_generated=0)
        entry["actual_ttft_ms"] = max(sample.ttft_ms, 0.0)
        entry["actual_tpot_ms"] = max(sample.tpot_ms, 0.0)
        entry["timestamp"] = datetime.now(UTC).isoformat()
        pending = self._pending
        pending.append(entry)
        if len(pending) > _MAX_PENDING:
            del pending[: len(pending) - _MAX_PENDING]
        for target, value in (("ttft", sample.ttft_ms), ("tpot", sample.tpot_ms)):
            if value > 0:
                self.stats.observations[target] += 1

    async def aclose(self) -> None:
        if self._closed:
            return
        self._closed = True
        task, self._task = self._task, None
        await cancel_and_wait(task)
        if task is not None:
            await self.flush()
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    def _start(self) -> None:
        if self._task is None and not self._closed:
            self._task = start_guarded(self._run(), name="epp-latency-predictor-flush")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.flush_interval)
            await self.flush()

    async def flush(self) -> bool:
        """Send the queued samples (at most ``max_sample_size``, randomly chosen); True when the server took them."""
        entries, self._pending = self._pending, []
        if not entries:
            return False
        limit = self.settings.max_sample_size
        if len(entries) > limit:
            entries = self._rng.sample(entries, limit)
        url = self.settings.training_url + "/add_training_data_bulk"
        try:
            response = await self._http().post(
                url, content=orjson.dumps({"entries": entries}), headers={"content-type": "application/json"}
            )
        except httpx.HTTPError as e:
            self.stats.training_failures += 1
            log.warning("training samples not sent", extra={"url": url, "error": f"{type(e).__name__}: {e}"})
            return False
        if response.status_code != 202:
            self.stats.training_failures += 1
            log.warning("training samples refused", extra={"url": url, "status": response.status_code})
            return False
        self.stats.samples_sent += len(entries)
        return True
