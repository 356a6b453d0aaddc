"""A routing decision made in the director's dry-run mode, with the reasons: what ``Explain`` returns.

:meth:`~epp.requestcontrol.director.PoolDirector.explain` runs the code real requests run, with
an :class:`Explanation` threaded through it. In that mode the director counts nothing, does not
take the conformance hooks' round-robin turn, runs no PreRequest plugin (so the prefix index
learns nothing) and changes no admission state; the scheduler records its steps into
``scheduling`` instead of metrics. Plugins draw from their random generators as in a real
cycle, so a random pick in a dry run moves the generator like a request would.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass, field

from epp.errors import EppError
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.scheduling.trace import SchedulingTrace

__all__ = ["Admission", "Explanation"]


class Admission(enum.Enum):
    """What the admission step said (``None`` on an :class:`Explanation`: not reached)."""

    ADMITTED = "admitted"
    SHED = "shed"
    NOT_CHECKED = "not-checked"
    """The configuration sheds by itself (the v0.3 filter tree): the director has no admission step."""


@dataclass(slots=True)
class Explanation:
    """The request as resolved (model, priority on ``request``), each step's outcome and the pick."""

    request: InferenceRequest
    admission: Admission | None = None
    admission_reason: str = ""
    scheduling: SchedulingTrace = field(default_factory=SchedulingTrace)
    picked: Sequence[EndpointState] = ()
    error: EppError | None = None
    """Set when the decision failed: the error a client would get."""
