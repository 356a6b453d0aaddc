"""Admission plugins (upstream's ``Admitter``, extension point ``Admission``): a last word before scheduling.

The pipeline runs them after the data producers and before the scheduling cycle, in configuration
order, over the request's candidates; the first that denies ends the request. Upstream wraps a
denial as ``Internal`` ("request cannot be admitted: <the plugin's error>"), so the client gets
500; :class:`Denial` carries the plugin's own error (its upstream code name and message) so the
body reads as upstream's. An admitter that admits returns None. This is not the saturation
admission (or the flow-control queue) that runs before the candidates are chosen.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest

__all__ = ["Admitter", "Denial"]


@dataclass(frozen=True, slots=True)
class Denial:
    """Why an admitter refused a request: upstream's error code name (``ResourceExhausted``) and message; no
    code for a plugin whose upstream error is a plain one (``latency-slo-admitter``'s)."""

    code: str
    message: str

    def __str__(self) -> str:
        return f"inference error: {self.code} - {self.message}" if self.code else self.message


@runtime_checkable
class Admitter(Protocol):
    """Admits or denies a request over its candidates, after the data producers (upstream's Admitter)."""

    @property
    def typed_name(self) -> TypedName: ...

    def admit(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> Denial | None:
        """None to admit; a :class:`Denial` to refuse."""
        ...
