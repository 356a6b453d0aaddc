"""Admission without flow control: shed sheddable work when the pool is saturated.

A request is sheddable when its priority is below zero; it is dropped with 429 "system
saturated, sheddable request dropped" when the saturation detector reports the pool's
saturation over the candidates at >= 1.0, as upstream's legacy admission does (no candidates
count as saturated; how endpoints are combined is the detector's ``aggregation``). Priority >= 0
is never shed here, and its saturation is not even computed; that work either gets an endpoint
or fails later with 503/429 from candidate selection or scheduling. The director skips this step
for a configuration that sheds by itself (the v0.3 tree).
"""

from __future__ import annotations

from collections.abc import Sequence

from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.framework.saturation import SaturationDetector

__all__ = ["SHED_MESSAGE", "admit"]

SHED_MESSAGE = "system saturated, sheddable request dropped"


def admit(
    request: InferenceRequest, candidates: Sequence[EndpointState], detector: SaturationDetector, now: float
) -> None:
    """Return if the request may proceed; raise ``EppError(RESOURCE_EXHAUSTED)`` to shed it."""
    if request.priority < 0 and detector.saturation(candidates, now) >= 1.0:
        raise EppError(ErrorCode.RESOURCE_EXHAUSTED, SHED_MESSAGE)
