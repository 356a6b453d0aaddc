"""Request-header processors (upstream's ``RequestHeaderProcessor``): what a request's headers say about it.

The pipeline runs them first, once the request is assembled and before its model, objective and
flow are resolved, in configuration order. A processor reads the client's headers and publishes
what it resolves as a request attribute. One attribute has a reader in the pipeline itself:
:data:`AGENT_IDENTITY`, an agent session's identity, from which the request's fairness id is taken
when the client named none (upstream's Director does the same), so every turn of an agent
session queues in one flow.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from epp.framework.plugin import TypedName
from epp.framework.request import InferenceRequest, attribute_key

__all__ = ["AGENT_IDENTITY", "RequestHeaderProcessor"]

AGENT_IDENTITY = attribute_key("agent-identity")
"""The request attribute holding an agent session's identity (upstream's key carries no producer name)."""


@runtime_checkable
class RequestHeaderProcessor(Protocol):
    """Reads the request's headers before anything is resolved; publishes what it finds as attributes."""

    @property
    def typed_name(self) -> TypedName: ...

    def request_header(self, request: InferenceRequest) -> None: ...
