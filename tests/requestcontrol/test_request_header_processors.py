"""Request-header processors in the pipeline: agent-identity's session as the request's flow."""

from __future__ import annotations

import pytest
from pool_harness import Harness
from test_pipeline import make_store

from epp.config.loader import ConfigError
from epp.framework.request_header import AGENT_IDENTITY

CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: agent-identity
  parameters: {additionalSessionHeaders: [X-My-Agent]}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}]
"""


def test_it_is_alpha_upstream_so_it_needs_the_experimental_flag() -> None:
    with pytest.raises(ConfigError, match="agent-identity"):
        Harness(make_store(2), config_text=CONFIG)


async def test_the_flow_is_the_explicit_fairness_id_else_the_agents_session_else_the_default() -> None:
    h = Harness(make_store(2), config_text=CONFIG, allow_experimental_plugins=True)
    try:
        assert (await h.route(x_my_agent="session-7")).fairness_id == "session-7"
        explicit = await h.route(x_my_agent="session-7", x_llm_d_inference_fairness_id="tenant-a")
        assert explicit.fairness_id == "tenant-a" and explicit.flow() == "tenant-a"
        assert (await h.route()).fairness_id == "default-flow"
    finally:
        await h.http.aclose()


async def test_without_the_plugin_a_session_header_is_not_a_flow() -> None:
    h = Harness(make_store(2))
    try:
        request = await h.route(x_claude_code_session_id="cc")
        assert request.fairness_id == "default-flow" and AGENT_IDENTITY not in request.attributes
    finally:
        await h.http.aclose()
