"""The one interface both latency predictors serve (embedded and remote), and what they report.

``predict`` gets the feature rows (a matrix) of every candidate of one request and answers for all of them at once (or
None: no model yet, or the predictor failed, and the SLO plugins fall back); ``observe`` hands
over one finished request's sample; ``stats`` are the counts the metrics mirror at each scrape
(``PredictorStats``, in the framework: any plugin holding a predictor reports them, ``LatencyPredicting``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt

from epp.framework.latency_predictor import PredictorStats
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest
from epp.slo.features import Sample

__all__ = ["NO_RECORDING", "BulkPrediction", "LatencyRecorder", "Observation", "Predictor"]


@dataclass(frozen=True, slots=True)
class BulkPrediction:
    """Predicted TTFT and TPOT (ms) per row, in order; TPOT is 0 while no TPOT model exists."""

    ttft_ms: Sequence[float]
    tpot_ms: Sequence[float]


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
