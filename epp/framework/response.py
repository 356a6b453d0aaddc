"""What plugins see of a model server's response once it is complete: its token usage, and the metadata they add.

Upstream's ``ResponseBodyProcessor`` (extension point ``ResponseStreaming``) is called on every
response chunk and, synchronously, on the last; the in-tree plugins that implement it
(``request-attribute-reporter``, ``program-aware-fairness``) act on the last one only, which is
the only call here: :class:`ResponseComplete` plugins are told once, when the response is whole,
with the usage the response carried (the ``usage`` of a JSON body or of an SSE stream; zeros when
it carried none, as upstream's zero ``Usage``). What they put in
:attr:`CompletedResponse.dynamic_metadata` goes back to Envoy as dynamic metadata on the last answer
of the response (upstream attaches it the same way). :class:`ResponseTiming` says when the request
went upstream and when its response began and ended, for plugins that learn latencies
(``predicted-latency-producer``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest

__all__ = ["CompletedResponse", "ResponseComplete", "ResponseTiming", "Usage"]


@dataclass(frozen=True, slots=True)
class Usage:
    """Token counts reported by the model server (0 when not reported)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    total_tokens: int = 0


@dataclass(frozen=True, slots=True)
class ResponseTiming:
    """Moments of one request, in ``time.perf_counter()`` seconds: ``routed_at``, when the routing answer went
    to the gateway (upstream's PreRequest time); ``first_byte_at``, when the first byte of the response body
    arrived (None: the response had no body); ``ended_at``, when the response was complete."""

    routed_at: float
    first_byte_at: float | None
    ended_at: float


@dataclass(slots=True)
class CompletedResponse:
    """A response that reached its end; ``dynamic_metadata`` is namespace → key → number, filled by plugins."""

    usage: Usage = field(default_factory=Usage)
    status: int = 0
    """The HTTP status the model server answered (0: unknown)."""
    dynamic_metadata: dict[str, dict[str, float]] = field(default_factory=dict)
    timing: ResponseTiming | None = None
    """None when the request's moments are unknown (a request routed without a stream)."""


@runtime_checkable
class ResponseComplete(Protocol):
    """Plugins told once when a routed request's response is complete (not when it ended early)."""

    @property
    def typed_name(self) -> TypedName: ...

    def response_complete(self, request: InferenceRequest, response: CompletedResponse) -> None:
        """``request``'s response is whole: read its usage, add to its ``dynamic_metadata``."""
        ...
