"""A stand-in for the llm-d latency predictor's sidecars: the training and prediction servers' HTTP APIs.

The real ones (llm-d-latency-predictor: ``training_server.py`` on :8000, ``prediction_server.py`` on
:8001, FastAPI + XGBoost) are not on PyPI, so the picker's ``backend: remote`` is tested against
this: the same paths, request validation (the Pydantic models' fields and ranges; an invalid body is
FastAPI's 422 with ``detail``), status codes and response shapes; one server answers both APIs.

- ``POST /add_training_data_bulk`` ``{"entries": [...]}`` → 202 ``{"message": "Accepted N training samples."}``;
- ``POST /predict/bulk/strict`` ``{"requests": [...]}`` (1–10,000 rows) → ``{"predictions": [...],
  "total_requests", "successful_predictions", "failed_predictions", "processing_time_ms"}``, each
  prediction ``{"ttft_ms", "tpot_ms", "predicted_at", "model_type", "objective_type", "quantile",
  "last_model_load"}``; 503 until it has samples (the real prediction server's ``readyz`` is 503 until
  it has models);
- ``GET /status``, ``/healthz``, ``/readyz``.

Its "model" is no model: the p90 of the samples received with the same ``num_request_waiting`` (all
samples when none has it), so a test can see that what it sent is what it gets back. It imports
nothing from the picker.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from aiohttp import web

__all__ = ["LatencyPredictorServer"]

_FRACTIONS = ("kv_cache_percentage", "prefix_cache_score")
_COUNTS = ("input_token_length", "num_request_waiting", "num_request_running", "num_tokens_generated")
_OPTIONAL_COUNTS = ("prefill_tokens_in_flight", "decode_tokens_in_flight", "encoder_matched_size", "encoder_input_size")
_POD_TYPES = ("", "prefill", "decode")


class _InvalidError(Exception):
    pass


def _number(row: Mapping[str, Any], key: str, *, required: bool, integer: bool, low: float, high: float) -> None:
    if key not in row:
        if required:
            raise _InvalidError(f"{key}: field required")
        return
    value = row[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or (integer and not isinstance(value, int)):
        raise _InvalidError(f"{key}: must be {'an integer' if integer else 'a number'}")
    if not math.isfinite(value) or not low <= value <= high:
        raise _InvalidError(f"{key}: must be in [{low}, {high}]")


def _row(row: Any, *, training: bool) -> None:
    """Upstream's ``PredictionRequest`` / ``TrainingEntry`` checks."""
    if not isinstance(row, dict):
        raise _InvalidError("each row must be an object")
    for key in _FRACTIONS:
        _number(row, key, required=True, integer=False, low=0.0, high=1.0)
    for key in _COUNTS:
        _number(row, key, required=True, integer=True, low=0, high=math.inf)
    for key in _OPTIONAL_COUNTS:
        _number(row, key, required=False, integer=True, low=0, high=math.inf)
    if row.get("pod_type") not in (*_POD_TYPES, None):
        raise _InvalidError("pod_type: must be '', 'prefill' or 'decode'")
    if training:
        for key in ("actual_ttft_ms", "actual_tpot_ms"):
            _number(row, key, required=True, integer=False, low=0.0, high=math.inf)


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else 0.0


class LatencyPredictorServer:
    """Both sidecar APIs on one ``host:port`` (port 0: any free one); ``samples`` are the entries received."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.host = host
        self.port = port
        self.samples: list[dict[str, Any]] = []
        self.prediction_calls = 0
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def __aenter__(self) -> LatencyPredictorServer:
        app = web.Application()
        app.router.add_post("/add_training_data_bulk", self._train)
        app.router.add_post("/predict/bulk/strict", self._predict)
        app.router.add_get("/status", self._status)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        runner = self._runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port)
        await site.start()
        self.port = int(runner.addresses[0][1])
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await runner.cleanup()

    async def _rows(self, request: web.Request, field: str, *, training: bool) -> list[dict[str, Any]]:
        try:
            body = await request.json()
        except ValueError:
            raise web.HTTPUnprocessableEntity(text='{"detail": "body is not JSON"}') from None
        rows = body.get(field) if isinstance(body, dict) else None
        if not isinstance(rows, list) or (not training and not 1 <= len(rows) <= 10_000):
            raise web.HTTPUnprocessableEntity(text=f'{{"detail": "{field}: a list of 1-10000 rows is required"}}')
        try:
            for row in rows:
                _row(row, training=training)
        except _InvalidError as e:
            raise web.HTTPUnprocessableEntity(text=f'{{"detail": "{e}"}}') from None
        return rows

    async def _train(self, request: web.Request) -> web.Response:
        entries = await self._rows(request, "entries", training=True)
        self.samples.extend(entries)
        return web.json_response({"message": f"Accepted {len(entries)} training samples."}, status=202)

    async def _predict(self, request: web.Request) -> web.Response:
        start = time.perf_counter()
        rows = await self._rows(request, "requests", training=False)
        self.prediction_calls += 1
        if not self.samples:
            return web.json_response({"detail": "models not ready"}, status=503)
        now = datetime.now(UTC).isoformat()
        predictions = []
        for row in rows:
            alike = [s for s in self.samples if s["num_request_waiting"] == row["num_request_waiting"]] or self.samples
            predictions.append(
                {
                    "ttft_ms": _p90([s["actual_ttft_ms"] for s in alike if s["actual_ttft_ms"] > 0]),
                    "tpot_ms": _p90([s["actual_tpot_ms"] for s in alike if s["actual_tpot_ms"] > 0]),
                    "predicted_at": now,
                    "model_type": "stand-in",
                    "objective_type": "quantile",
                    "quantile": 0.9,
                    "last_model_load": None,
                }
            )
        return web.json_response(
            {
                "predictions": predictions,
                "total_requests": len(rows),
                "successful_predictions": len(rows),
                "failed_predictions": 0,
                "processing_time_ms": (time.perf_counter() - start) * 1000,
            }
        )

    async def _status(self, request: web.Request) -> web.Response:
        return web.json_response(
            {
                "is_ready": bool(self.samples),
                "model_type": "stand-in",
                "objective_type": "quantile",
                "quantile": 0.9,
                "last_model_load": None,
                "training_server_url": self.url,
                "models_exist": {"ttft_model": bool(self.samples), "tpot_model": bool(self.samples)},
                "ensemble_active": False,
            }
        )

    async def _healthz(self, request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _readyz(self, request: web.Request) -> web.Response:
        if not self.samples:
            return web.json_response({"detail": "models not ready"}, status=503)
        return web.json_response({"status": "ready"})
