"""The admission stage of a pool's pipeline: shed by saturation, queue (flow control), or none at all.

Which one a pipeline has is decided once, when it is built from its configuration:

- :class:`SaturationAdmission` (no flow control): a sheddable request (priority < 0) is dropped
  with 429 "system saturated, sheddable request dropped" when the saturation detector puts the
  candidates' saturation at >= 1.0, as upstream's legacy admission does (no candidates count as
  saturated; how endpoints are combined is the detector's ``aggregation``). With prefill and
  decode pods, the busier stage's saturation counts, as in flow control
  (:func:`~epp.framework.saturation.stage_saturation`; upstream's legacy admission reads the
  candidates whole). Priority >= 0 is never
  shed here and its saturation is not even computed; that work either gets an endpoint or fails
  later with 503/429 from candidate selection or scheduling. A detector that raises, or answers
  something else than a number, admits the request (fail open) and is told to ``failed``;
- :class:`QueueAdmission` (the ``flowControl`` gate): every request is queued; one the queue holds
  waits until it is dispatched (or leaves with its outcome's error), and is scheduled on the pool
  as it is by then;
- :class:`NoAdmission`: a configuration that sheds by itself (the v0.3 tree) has no admission step.

Each stage also says what it *would* do without doing it (``verdict``), for Explain; the queue's
verdict is "not checked": a dry run never enqueues.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from typing import Protocol

from epp.clock import Clock
from epp.errors import EppError, ErrorCode
from epp.flowcontrol.controller import FlowController
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.framework.saturation import SaturationDetector, stage_saturation
from epp.scheduling.plugin_errors import PluginFailed, read_saturation

__all__ = [
    "SHED_MESSAGE",
    "Admission",
    "AdmissionStage",
    "NoAdmission",
    "QueueAdmission",
    "SaturationAdmission",
    "Verdict",
]

SHED_MESSAGE = "system saturated, sheddable request dropped"

Candidates = Callable[[], Sequence[EndpointState]]
"""The endpoints the request may be scheduled on, as they are when called."""


class Admission(enum.Enum):
    """What the admission step said."""

    ADMITTED = "admitted"
    SHED = "shed"
    NOT_CHECKED = "not-checked"
    """No admission step (a configuration that sheds by itself), or the flow-control queue's place."""


Verdict = tuple[Admission, EppError | None]
"""(what the stage says, the error a refused request gets)."""


class AdmissionStage(Protocol):
    async def admit(
        self, request: InferenceRequest, candidates: Candidates, failed: PluginFailed
    ) -> Sequence[EndpointState]:
        """The endpoints to schedule ``request`` on once admitted (possibly after a wait); EppError to refuse."""
        ...

    def verdict(self, request: InferenceRequest, candidates: Sequence[EndpointState], failed: PluginFailed) -> Verdict:
        """What :meth:`admit` would say now, without any effect."""
        ...


class NoAdmission:
    __slots__ = ()

    async def admit(
        self, request: InferenceRequest, candidates: Candidates, failed: PluginFailed
    ) -> Sequence[EndpointState]:
        return candidates()

    def verdict(self, request: InferenceRequest, candidates: Sequence[EndpointState], failed: PluginFailed) -> Verdict:
        return Admission.NOT_CHECKED, None


class SaturationAdmission:
    __slots__ = ("_clock", "_detector")

    def __init__(self, detector: SaturationDetector, clock: Clock) -> None:
        self._detector = detector
        self._clock = clock

    async def admit(
        self, request: InferenceRequest, candidates: Candidates, failed: PluginFailed
    ) -> Sequence[EndpointState]:
        endpoints = candidates()
        admission, refusal = self.verdict(request, endpoints, failed)
        if refusal is not None:
            raise refusal
        return endpoints

    def verdict(self, request: InferenceRequest, candidates: Sequence[EndpointState], failed: PluginFailed) -> Verdict:
        if request.priority < 0 and self._saturation(candidates, failed) >= 1.0:
            return Admission.SHED, EppError(ErrorCode.RESOURCE_EXHAUSTED, SHED_MESSAGE)
        return Admission.ADMITTED, None

    def _saturation(self, candidates: Sequence[EndpointState], failed: PluginFailed) -> float:
        detector, now = self._detector, self._clock.now()
        return stage_saturation(lambda some: read_saturation(detector, some, now, failed), candidates).effective


class QueueAdmission:
    __slots__ = ("_flow_control",)

    def __init__(self, flow_control: FlowController) -> None:
        self._flow_control = flow_control

    async def admit(
        self, request: InferenceRequest, candidates: Candidates, failed: PluginFailed
    ) -> Sequence[EndpointState]:
        flow_control = self._flow_control
        await flow_control.wait(flow_control.enqueue(request))  # a request dispatched at once does not suspend
        return candidates()

    def verdict(self, request: InferenceRequest, candidates: Sequence[EndpointState], failed: PluginFailed) -> Verdict:
        return Admission.NOT_CHECKED, None
