"""The one interface both latency predictors serve (embedded and remote), and what they report.

``predict`` gets the feature rows (a matrix) of every candidate of one request and answers for all of them at once (or
None: no model yet, or the predictor failed, and the SLO plugins fall back); ``observe`` hands
over one finished request's sample; ``stats`` are the counts the metrics mirror at each scrape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np
import numpy.typing as npt

from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.slo.features import Sample
from epp.slo.trainer import Quality

__all__ = ["NO_RECORDING", "BulkPrediction", "LatencyRecorder", "Observation", "Predictor", "PredictorStats"]


@dataclass(frozen=True, slots=True)
class BulkPrediction:
    """Predicted TTFT and TPOT (ms) per row, in order; TPOT is 0 while no TPOT model exists."""

    ttft_ms: Sequence[float]
    tpot_ms: Sequence[float]


@dataclass(slots=True)
class PredictorStats:
    """Counts since the predictor was made (a configuration reload keeps the predictor, so they continue)."""

    backend: str
    predictions: int = 0
    """Batched predictions answered."""
    prediction_failures: int = 0
    """Batched predictions that could not be made (no model yet counts as a failure only for the remote)."""
    observations: dict[str, int] = field(default_factory=lambda: {"ttft": 0, "tpot": 0})
    """Samples observed, by target."""
    samples: dict[str, int] = field(default_factory=lambda: {"ttft": 0, "tpot": 0})
    """Training samples held now, by target (the embedded predictor's store)."""
    test_samples: dict[str, int] = field(default_factory=lambda: {"ttft": 0, "tpot": 0})
    training_runs: int = 0
    """Models trained (the embedded predictor; the remote trains on its own schedule)."""
    training_failures: int = 0
    """Training runs (embedded) or sample flushes (remote) that failed."""
    samples_sent: int = 0
    """Samples the remote training server accepted."""
    training_seconds: float = 0.0
    """The last training run's duration (wall time on the worker thread)."""
    training_thread: str = ""
    """The name of the thread the last training ran on (never the event loop's)."""
    quality: dict[str, Quality] = field(default_factory=dict)
    """The last trained models' held-out quality, by target."""
    model_ready: bool = False


class Predictor(Protocol):
    """A latency predictor: the embedded one (``embedded.py``) or upstream's sidecars (``remote.py``)."""

    @property
    def stats(self) -> PredictorStats: ...

    async def predict(self, rows: npt.NDArray[np.float64]) -> BulkPrediction | None:
        """Predictions for every row (``features.COLUMNS``), or None when there is no model (yet) or it failed."""
        ...

    def observe(self, sample: Sample) -> None:
        """One finished request's features at dispatch and its observed TTFT / TPOT (ms; 0 = not observed)."""
        ...

    async def aclose(self) -> None:
        """Stop training or flushing, save what should survive; safe to call twice."""
        ...


class LatencyRecorder(Protocol):
    """Where ``predicted-latency-producer`` reports each request (upstream's per-request series); the runtime's
    is ``series.SloSeries``, handed to the plugin as ``PluginContext.extras["latency_recorder"]``."""

    def predicted(self, plugin: TypedName, request: InferenceRequest, seconds: float) -> None:
        """A batched prediction for ``request``'s candidates took ``seconds``."""
        ...

    def observed(self, plugin: TypedName, request: InferenceRequest, observation: Observation) -> None:
        """``request``'s response ended: what was predicted for its endpoint and what it took."""
        ...


@dataclass(frozen=True, slots=True)
class Observation:
    """One finished request (ms; 0 = not predicted, not observed, or no objective)."""

    ttft_ms: float
    tpot_ms: float
    predicted_ttft_ms: float
    predicted_tpot_ms: float
    ttft_slo_ms: float
    tpot_slo_ms: float


class _NoRecording:
    def predicted(self, plugin: TypedName, request: InferenceRequest, seconds: float) -> None:
        return None

    def observed(self, plugin: TypedName, request: InferenceRequest, observation: Observation) -> None:
        return None


NO_RECORDING: LatencyRecorder = _NoRecording()
"""The recorder of a producer built without the runtime's series (tests, the benchmark)."""
