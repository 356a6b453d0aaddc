"""A routing decision made by a dry run of the pipeline, with the reasons: what ``Explain`` returns.

The pipeline runs exactly as for a served request, with an
:class:`~epp.requestcontrol.recorder.ExplainRecorder` that keeps each step here instead of acting
on it: nothing is counted, no conformance round-robin turn is taken, no PreRequest plugin runs (so
the prefix index learns nothing), the flow-control queue is not entered and no admission state
changes. Plugins draw from their random generators as in a real cycle, so a random pick in a dry
run moves the generator like a request would.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.errors import EppError
from epp.framework.disaggregation import Decision
from epp.framework.endpoint import EndpointState
from epp.framework.latency import LatencyPredictions
from epp.framework.request import InferenceRequest
from epp.requestcontrol.admission import Admission
from epp.scheduling.trace import SchedulingTrace

__all__ = ["Explanation"]


@dataclass(slots=True)
class Explanation:
    """The request as resolved (model, priority on ``request``), each step's outcome and the pick."""

    request: InferenceRequest
    admission: Admission | None = None
    """None: the request did not reach the admission step."""
    admission_reason: str = ""
    scheduling: SchedulingTrace = field(default_factory=SchedulingTrace)
    picked: Sequence[EndpointState] = ()
    destination: str = ""
    """``x-gateway-destination-endpoint`` as sent (a data-parallel handler may rewrite the port)."""
    upstream_headers: dict[str, str] = field(default_factory=dict)
    """What the picker adds to the forwarded request (the prefill pod to use, the data-parallel rank)."""
    disaggregation: Decision | None = None
    """Each stage of a disaggregation handler, the decider's verdict and numbers; None for other handlers."""
    error: EppError | None = None
    """Set when the decision failed: the error a client would get."""
    latency: list[LatencyPredictions] = field(default_factory=list)
    """What the latency producers predicted for the candidates."""
    candidates: Sequence[EndpointState] = ()
    """The endpoints the data producers saw (the predictions' endpoints)."""
