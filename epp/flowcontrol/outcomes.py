"""How a queued request ends, and what the client is told: the llm-d router's statuses and drop reasons.

Every outcome but ``Dispatched`` is an :class:`~epp.errors.EppError` carrying the header
``x-llm-d-request-dropped-reason`` (``translateFlowControlOutcome`` in the llm-d router's
``requestcontrol/admission.go``; the messages wrap upstream's error texts the same way):

=========================  ======  ==========================  ==============================================
outcome                    status  drop reason                 when
=========================  ======  ==========================  ==============================================
RejectedCapacity           429     rejected-saturated          the queue (global or band) is full
RejectedNoEndpoints        503     rejected-no-endpoints       the queue is full and the pool has no endpoint
EvictedTTL                 429     rejected-ttl-expired        the request waited its TTL out
EvictedNoEndpoints         503     rejected-no-endpoints       ... while the pool had no endpoint
EvictedContextCancelled    503     rejected-context-cancelled  the client went away (nobody reads the answer)
EvictedOther               503     rejected-shutting-down      the picker is stopping
=========================  ======  ==========================  ==============================================
"""

from __future__ import annotations

import enum

from epp.errors import EppError, ErrorCode
from epp.framework.headers import REQUEST_DROPPED_REASON

__all__ = ["Outcome"]

_REJECTED = "request rejected pre-queue"
_EVICTED = "request evicted from queue"


class Outcome(enum.Enum):
    """A queued request's end, named as upstream's ``QueueOutcome`` (the metrics' ``outcome`` label)."""

    DISPATCHED = ("Dispatched", None, "", "")
    REJECTED_CAPACITY = (
        "RejectedCapacity",
        ErrorCode.RESOURCE_EXHAUSTED,
        "rejected-saturated",
        f"{_REJECTED}: queue at capacity",
    )
    REJECTED_NO_ENDPOINTS = (
        "RejectedNoEndpoints",
        ErrorCode.SERVICE_UNAVAILABLE,
        "rejected-no-endpoints",
        f"no endpoints available: {_REJECTED}: no endpoints available",
    )
    EVICTED_TTL = (
        "EvictedTTL",
        ErrorCode.RESOURCE_EXHAUSTED,
        "rejected-ttl-expired",
        f"request timed out in queue: {_EVICTED}: request TTL expired",
    )
    EVICTED_NO_ENDPOINTS = (
        "EvictedNoEndpoints",
        ErrorCode.SERVICE_UNAVAILABLE,
        "rejected-no-endpoints",
        f"request timed out in queue and no endpoints are available: {_EVICTED}: no endpoints available",
    )
    EVICTED_CONTEXT_CANCELLED = (
        "EvictedContextCancelled",
        ErrorCode.SERVICE_UNAVAILABLE,
        "rejected-context-cancelled",
        f"client disconnected: {_EVICTED}: request context cancelled",
    )
    EVICTED_OTHER = (
        "EvictedOther",
        ErrorCode.SERVICE_UNAVAILABLE,
        "rejected-shutting-down",
        f"flow controller shutting down: {_EVICTED}: flow controller is not running",
    )

    def __init__(self, label: str, code: ErrorCode | None, reason: str, message: str) -> None:
        self.label = label
        self.code = code
        self.reason = reason
        self.message = message

    def error(self) -> EppError:
        """The error the client gets (not for ``DISPATCHED``)."""
        assert self.code is not None
        return EppError(self.code, self.message, {REQUEST_DROPPED_REASON: self.reason})
