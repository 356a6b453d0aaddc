"""Predicted latency per endpoint: what ``predicted-latency-producer`` publishes and the SLO plugins read.

Upstream's ``LatencyPredictionInfo`` endpoint attribute (the llm-d router's
``datalayer/attribute/latency``): for one request and one candidate endpoint, the predicted time to
first token and time per output token (ms), the headroom to the request's objectives
(``SLO − prediction``, negative when the prediction misses it), whether each objective is met, and
how many requests this picker has in flight there. Here it is a request attribute
(:class:`LatencyPredictions`, one per producer, under ``LatencyPredictionInfo/<producer>``), since
an endpoint's state is shared by every request in flight and a prediction belongs to one request.

The objectives come from the request headers ``x-llm-d-slo-ttft-ms`` / ``x-llm-d-slo-tpot-ms``
(or the older ``x-slo-ttft-ms`` / ``x-slo-tpot-ms``): milliseconds as a float; a missing header,
an unparsable, negative or non-finite value is no objective (0), as upstream reads them (it
keeps a negative or infinite value; here those are no objective either).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from epp.framework import headers
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest, attribute_key

__all__ = ["LATENCY_PREDICTION_INFO", "LatencyPrediction", "LatencyPredictions", "slo_ms"]

LATENCY_PREDICTION_INFO = "LatencyPredictionInfo"
"""The attribute's name (upstream's data key); its key on a request is ``LatencyPredictionInfo/<producer>``."""


def slo_ms(request_headers: Mapping[str, str], name: str) -> float:
    """The objective header ``name`` (``headers.TTFT_SLO`` or ``headers.TPOT_SLO``) in ms; 0 when there is none."""
    raw = headers.read(request_headers, name)
    if not raw:
        return 0.0
    try:
        value = float(raw)
    except ValueError:
        return 0.0
    return value if math.isfinite(value) and value > 0 else 0.0


class LatencyPrediction(NamedTuple):
    """One candidate's prediction for one request; times and headrooms in milliseconds (a tuple: one is made
    per candidate per request, and a tuple is the cheapest immutable record to make)."""

    ttft_ms: float
    tpot_ms: float
    ttft_valid: bool
    tpot_valid: bool
    ttft_headroom: float
    tpot_headroom: float
    dispatched: int
    """Requests this picker has in flight on the endpoint (upstream's ``dispatchedRequestCount``)."""

    @property
    def valid(self) -> bool:
        """Both objectives met (upstream's ``IsValid``)."""
        return self.ttft_valid and self.tpot_valid


@dataclass(slots=True)
class LatencyPredictions:
    """A producer's predictions for one request: its objectives and, per endpoint key, the prediction.

    ``by_endpoint`` is empty when no prediction could be made (no model yet, the predictor failed):
    readers then fall back, as upstream's do when the attribute is absent.
    """

    producer: str
    ttft_slo_ms: float
    tpot_slo_ms: float
    by_endpoint: dict[str, LatencyPrediction] = field(default_factory=dict)

    def of(self, state: EndpointState) -> LatencyPrediction | None:
        return self.by_endpoint.get(state.endpoint.key)

    @staticmethod
    def key(producer: str) -> str:
        """The request-attribute key of ``producer``'s predictions."""
        return attribute_key(LATENCY_PREDICTION_INFO, producer)

    @staticmethod
    def read(request: InferenceRequest, producer: str) -> LatencyPredictions | None:
        """``producer``'s predictions for ``request``, None when it made none."""
        found = request.attributes.get(attribute_key(LATENCY_PREDICTION_INFO, producer))
        return found if isinstance(found, LatencyPredictions) else None
