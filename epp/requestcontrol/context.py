"""One request's context in its pool's pipeline: what it asked for, what was decided, what goes upstream.

Made when the body is parsed (or, for a request without one, when it is routed) and kept by the
ext_proc stream until the response ends: the pipeline it was made by is the configuration snapshot
of the whole request, so a reload mid-request changes nothing for it.
"""

from __future__ import annotations

from dataclasses import dataclass

from epp.framework.parsing import ParsedBody, Parser
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.requestcontrol.recorder import Recorder

__all__ = ["RequestContext"]


@dataclass(slots=True)
class RequestContext:
    """``forward_body`` is the body the model server gets when it differs from the client's (a model
    rewrite): a new serialisation; ``request.body`` stays as the client sent it."""

    request: InferenceRequest
    subset: frozenset[str] | None
    recorder: Recorder
    parsed: ParsedBody | None = None
    """None for a request without a body."""
    parser: Parser | None = None
    forward_body: bytes | None = None
    decision: RoutingDecision | None = None
    routed_epoch: int = 0
    """The health epoch of the decision's first target when routed (a later answer may be a straggler)."""
