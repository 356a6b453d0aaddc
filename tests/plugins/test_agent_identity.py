"""agent-identity: an agent session's header as the request's flow, as upstream's request-header processor."""

from __future__ import annotations

import pytest

from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.request_header import AGENT_IDENTITY
from epp.plugins import agent_identity


def _identity(plugin: agent_identity.AgentIdentity, **headers: str) -> object:
    request = InferenceRequest(request_id="r", headers=headers)
    plugin.request_header(request)
    return request.attributes.get(AGENT_IDENTITY)


def test_the_first_non_empty_session_header_in_upstreams_order_is_the_identity() -> None:
    plugin = agent_identity.create("a", {}, PluginContext())
    assert _identity(plugin, **{"session_id": "old-codex", "x-session-affinity": "opencode"}) == "opencode"
    assert _identity(plugin, **{"x-claude-code-session-id": "cc", "session-id": "codex"}) == "cc"
    assert _identity(plugin, **{"x-claude-code-session-id": "", "session_id": "legacy"}) == "legacy"
    assert _identity(plugin, **{"x-other": "v"}) is None


def test_additional_headers_come_first_lower_cased() -> None:
    plugin = agent_identity.create("a", {"additionalSessionHeaders": [" X-My-Agent ", ""]}, PluginContext())
    assert plugin.headers[0] == "x-my-agent" and plugin.headers[1:] == agent_identity.DEFAULT_SESSION_HEADERS
    assert _identity(plugin, **{"x-my-agent": "mine", "x-claude-code-session-id": "cc"}) == "mine"


@pytest.mark.parametrize("parameters", [{"additionalSessionHeaders": "x-a"}, {"sessionHeaders": ["x-a"]}])
def test_bad_parameters_are_refused_by_name(parameters: dict[str, object]) -> None:
    with pytest.raises(PluginConfigError, match="agent-identity.parameters"):
        agent_identity.create("a", parameters, PluginContext())
