"""A routed request's load on its endpoint, counted in when it is routed and out once, when it is over.

The in-flight counts (requests and estimated tokens) are what the in-flight scorers and the
concurrency detector read; the count out mirrors the count in, so they live together.
"""

from __future__ import annotations

from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import InFlightEstimator

__all__ = ["count_in", "count_out"]


def count_in(request: InferenceRequest, target: EndpointState, estimator: InFlightEstimator) -> None:
    """``request`` is in flight on ``target`` from now until :func:`count_out`."""
    tokens = request.in_flight_tokens = estimator.estimate_tokens(request)
    target.in_flight_requests += 1
    target.in_flight_tokens += tokens


def count_out(request: InferenceRequest, target: EndpointState) -> None:
    """Release what :func:`count_in` added."""
    target.in_flight_requests -= 1
    target.in_flight_tokens -= request.in_flight_tokens
