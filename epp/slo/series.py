"""SLO-aware routing's series: the llm-d router's per-request latency series and ours for the predictor.

Upstream's producer (``predictedlatency/metrics.go``) writes, per request, with labels
``{plugin_name, plugin_type, model_name, target_model_name}`` (its deprecated ``inference_objective_*``
twins carry only the two model labels): histograms of the predicted TTFT and TPOT at dispatch
(``llm_d_epp_request_predicted_{ttft,tpot}_seconds``) and of each batched prediction's duration
(recorded in both ``llm_d_epp_request_{ttft,tpot}_prediction_duration_seconds``), the SLO violations
(``llm_d_epp_request_slo_violation_total{type}``, when the observed value passes an objective > 0) and
the gauge ``llm_d_epp_inference_request_metric{type}`` (the last ttft, predicted_ttft, tpot,
predicted_tpot, ttft_slo_violation, tpot_slo_violation). :class:`SloSeries` is the producer's
:class:`~epp.slo.predictor.LatencyRecorder`.

Ours, mirrored from each predictor at every ``/metrics`` scrape (``mirror``), by ``plugin_name``:
``epp_latency_predictor_predictions_total`` and ``_prediction_failures_total``,
``epp_latency_predictor_observations_total{target}``, ``epp_latency_predictor_samples{target, set}``
(the training and held-out samples held), ``epp_latency_predictor_training_runs_total{result}``,
``epp_latency_predictor_training_seconds`` (the last run), ``epp_latency_predictor_p90_error{target, set}``
and ``epp_latency_predictor_coverage{target, set}``: the quality of the model in force, judged on the
held-out samples at its training (``set="held_out"``) and on the last 1,000 requests served
(``set="served"``: each request's predicted p90 against what it took), as ``trainer.quality`` defines it.

Only the runtime imports this module (plugins never import telemetry).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable

import numpy as np

from epp.framework.latency_predictor import PredictorStats
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.slo.predictor import Observation
from epp.slo.trainer import quality
from epp.telemetry.families import Names
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Gauge

__all__ = ["SloSeries"]

_GENERAL = (0.005, 0.025, 0.05, 0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 1.25, 1.5, 2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 45, 60, 120)
_TPOT = (
    0.0005,
    0.00205,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.125,
    0.15,
    0.2,
    0.3,
    0.4,
    0.5,
    0.6,
    0.8,
    1,
    1.5,
    2,
)
_PREDICTION = (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
_LABELS = ("plugin_name", "plugin_type", "model_name", "target_model_name")
_GIE_LABELS = ("model_name", "target_model_name")
_WINDOW = 1000
_QUANTILE = 0.9


def _names(suffix: str, text: str, *, typed: bool = False) -> Names:
    extra = ("type",) if typed else ()
    return Names(
        f"inference_objective_{suffix}",
        f"llm_d_epp_{suffix}",
        text,
        labels=(*_LABELS, *extra),
        gie_labels=(*_GIE_LABELS, *extra),
    )


class SloSeries:
    """The series; a series set (``metrics.series(SloSeries)``), shared by every ``predicted-latency-producer``."""

    def __init__(self, metrics: EppMetrics) -> None:
        r = metrics.registry
        f = metrics.families
        self.predicted_ttft = f.histogram(
            _names("request_predicted_ttft_seconds", "Inference model Predicted TTFT distribution in seconds."),
            _GENERAL,
        )
        self.predicted_tpot = f.histogram(
            _names("request_predicted_tpot_seconds", "Inference model Predicted TPOT distribution in seconds."), _TPOT
        )
        self.ttft_duration = f.histogram(
            _names("request_ttft_prediction_duration_seconds", "Duration taken to generate TTFT predictions."),
            _PREDICTION,
        )
        self.tpot_duration = f.histogram(
            _names("request_tpot_prediction_duration_seconds", "Duration taken to generate TPOT predictions."),
            _PREDICTION,
        )
        self.violations = f.counter(
            _names("request_slo_violation_total", "Counter of SLO violations by violation type.", typed=True)
        )
        self.last = f.gauge(
            _names(
                "inference_request_metric",
                "Consolidated gauge for various inference request metrics including TTFT, TPOT, SLOs, and "
                "prediction durations.",
                typed=True,
            )
        )
        plugin = ("plugin_name",)
        self.predictions = Counter(
            "epp_latency_predictor_predictions_total", "Batched latency predictions answered.", plugin, registry=r
        )
        self.prediction_failures = Counter(
            "epp_latency_predictor_prediction_failures_total",
            "Batched latency predictions that could not be made (the SLO plugins fell back).",
            plugin,
            registry=r,
        )
        self.observations = Counter(
            "epp_latency_predictor_observations_total",
            "Finished requests the predictor learnt from, by target (ttft, tpot).",
            ("plugin_name", "target"),
            registry=r,
        )
        self.samples = Gauge(
            "epp_latency_predictor_samples",
            "Samples the embedded predictor holds, by target and set (train, held_out).",
            ("plugin_name", "target", "set"),
            registry=r,
        )
        self.training_runs = Counter(
            "epp_latency_predictor_training_runs_total",
            "Training runs of the embedded predictor (remote: sample flushes) by result.",
            ("plugin_name", "result"),
            registry=r,
        )
        self.training_seconds = Gauge(
            "epp_latency_predictor_training_seconds",
            "How long the last training run took on the predictor's worker thread.",
            plugin,
            registry=r,
        )
        self.error = Gauge(
            "epp_latency_predictor_p90_error",
            "Mean relative difference between the predicted and the observed p90 (decile groups of the "
            "predictions), on the held-out samples at training or on the last 1,000 requests served.",
            ("plugin_name", "target", "set"),
            registry=r,
        )
        self.coverage = Gauge(
            "epp_latency_predictor_coverage",
            "Fraction of observations at or under their predicted p90 (0.9 when calibrated).",
            ("plugin_name", "target", "set"),
            registry=r,
        )
        self._served: dict[tuple[str, str], deque[tuple[float, float]]] = {}

    # -- per request (the producer's LatencyRecorder) ---------------------------------------------

    def predicted(self, plugin: TypedName, request: InferenceRequest, seconds: float) -> None:
        values = (plugin.name, plugin.type, request.model, request.target_model)
        self.ttft_duration.labels(*values).observe(seconds)
        self.tpot_duration.labels(*values).observe(seconds)

    def observed(self, plugin: TypedName, request: InferenceRequest, observation: Observation) -> None:
        values = (plugin.name, plugin.type, request.model, request.target_model)
        last = self.last
        for target, actual, predicted, slo in (
            ("ttft", observation.ttft_ms, observation.predicted_ttft_ms, observation.ttft_slo_ms),
            ("tpot", observation.tpot_ms, observation.predicted_tpot_ms, observation.tpot_slo_ms),
        ):
            if actual <= 0:
                continue
            last.labels(*values, target).set(actual / 1000)
            if predicted > 0:
                (self.predicted_ttft if target == "ttft" else self.predicted_tpot).labels(*values).observe(
                    predicted / 1000
                )
                last.labels(*values, f"predicted_{target}").set(predicted / 1000)
                window = self._served.get((plugin.name, target))
                if window is None:
                    window = self._served[(plugin.name, target)] = deque(maxlen=_WINDOW)
                window.append((predicted, actual))
            if slo > 0:
                violated = actual > slo
                last.labels(*values, f"{target}_slo_violation").set(1.0 if violated else 0.0)
                if violated:
                    self.violations.labels(*values, target).inc()

    # -- at each scrape --------------------------------------------------------------------------

    def mirror(self, predictors: Iterable[tuple[str, PredictorStats]]) -> None:
        """Copy the producers' predictor counts (summed by plugin name: one name may serve several pools) and
        judge the served window."""
        by_name: dict[str, list[PredictorStats]] = {}
        for name, stats in predictors:
            by_name.setdefault(name, []).append(stats)
        for name, group in by_name.items():
            self.predictions.labels(name).mirror(sum(s.predictions for s in group))
            self.prediction_failures.labels(name).mirror(sum(s.prediction_failures for s in group))
            self.training_runs.labels(name, "success").mirror(sum(s.training_runs for s in group))
            self.training_runs.labels(name, "failure").mirror(sum(s.training_failures for s in group))
            self.training_seconds.labels(name).set(max(s.training_seconds for s in group))
            for target in ("ttft", "tpot"):
                self.observations.labels(name, target).mirror(sum(s.observations[target] for s in group))
                self.samples.labels(name, target, "train").set(sum(s.samples[target] for s in group))
                self.samples.labels(name, target, "held_out").set(sum(s.test_samples[target] for s in group))
                judged = [q for s in group if (q := s.quality.get(target)) is not None and q.samples]
                if judged:
                    held_out = max(judged, key=lambda q: q.samples)
                    self.error.labels(name, target, "held_out").set(held_out.error)
                    self.coverage.labels(name, target, "held_out").set(held_out.coverage)
                window = self._served.get((name, target))
                if window:
                    pairs = np.array(window, dtype=np.float64)
                    served = quality(pairs[:, 0], pairs[:, 1], _QUANTILE)
                    if served.samples:
                        self.error.labels(name, target, "served").set(served.error)
                        self.coverage.labels(name, target, "served").set(served.coverage)
