"""agent-identity: an agent session's identity from the headers its client sends, as the request's flow.

The llm-d router's ``requestheader/agentidentity``: the first non-empty header of
``additionalSessionHeaders`` (in order, lower-cased) and then the built-in list —
``x-claude-code-session-id`` (Claude Code), ``x-session-affinity`` (OpenCode), ``session-id`` and
``session_id`` (Codex) — becomes the request attribute ``agent-identity``. The pipeline takes the
request's fairness id from it when the client sent no ``x-llm-d-inference-fairness-id`` (or GIE's
spelling), so each agent session is one flow in flow control and in the ``fairness_id`` label.
No header: nothing is published and the request is in ``default-flow``, as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.request_header import AGENT_IDENTITY

__all__ = ["DEFAULT_SESSION_HEADERS", "TYPE", "AgentIdentity", "create"]

TYPE = "agent-identity"
DEFAULT_SESSION_HEADERS = ("x-claude-code-session-id", "x-session-affinity", "session-id", "session_id")


class AgentIdentity(NamedPlugin):
    """Publishes the first session header's value as the request's agent identity."""

    __slots__ = ("headers",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.REQUEST_HEADER})

    def __init__(self, name: str, headers: Sequence[str] = DEFAULT_SESSION_HEADERS) -> None:
        super().__init__(name)
        self.headers = tuple(headers)

    def request_header(self, request: InferenceRequest) -> None:
        get = request.headers.get
        for header in self.headers:
            identity = get(header)
            if identity:
                request.attributes[AGENT_IDENTITY] = identity
                return


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> AgentIdentity:
    """Factory; upstream's one parameter, ``additionalSessionHeaders`` (checked before the built-in list)."""
    p = Params(TYPE, parameters)
    extra = p.strings("additionalSessionHeaders") or []
    p.done()
    return AgentIdentity(name, [h.strip().lower() for h in extra if h.strip()] + list(DEFAULT_SESSION_HEADERS))
