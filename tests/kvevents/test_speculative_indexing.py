"""speculativeIndexing: a routed request's blocks count as held by its endpoint until the TTL passes,
so the next request with the same prefix follows it before the engine's BlockStored events arrive."""

from __future__ import annotations

import time

import pytest

from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import ApiKind, InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins.precise_prefix_producer import create

MODEL = "m"


def _states() -> list[EndpointState]:
    return [EndpointState(Endpoint("ns", f"pod{i}-rank-0", f"pod{i}", f"10.0.0.{i}", 8000)) for i in range(2)]


def _request(tokens: list[int]) -> InferenceRequest:
    request = InferenceRequest("r", model=MODEL, target_model=MODEL, api=ApiKind.COMPLETIONS)
    request.token_ids = tokens
    return request


def _route(params: dict[str, object], states: list[EndpointState], tokens: list[int]) -> list[int]:
    """Match blocks per endpoint for a second request after the first was routed to ``states[1]``."""
    producer = create("p", params, PluginContext())
    first = CycleState()
    producer.prefix_match(first, _request(tokens), states)
    producer.pre_request(first, _request(tokens), SchedulingResult({"default": ProfileResult([states[1]])}, "default"))
    info = producer.prefix_match(CycleState(), _request(tokens + [7] * 16), states)
    assert info is not None
    return info.match_blocks


def test_routed_prefix_is_followed_before_any_event() -> None:
    states = _states()
    tokens = list(range(64))
    assert _route({"speculativeIndexing": True}, states, tokens) == [0, 4]
    assert _route({}, states, tokens) == [0, 0]  # off by default, as upstream


def test_speculative_entries_expire() -> None:
    producer = create("p", {"speculativeIndexing": True, "speculativeTTL": "50ms"}, PluginContext())
    index = producer.index
    now = time.monotonic()
    index.speculate("pod", [1, 2, 3], now + 0.05, now)
    assert index.longest_prefix("pod", [1, 2, 3], now) == 3
    assert index.longest_prefix("pod", [1, 2, 3], now + 0.06) == 0
    assert len(index) == 0  # never counted as engine blocks


def test_bad_ttl_is_refused() -> None:
    with pytest.raises(PluginConfigError, match="speculativeTTL"):
        create("p", {"speculativeIndexing": True, "speculativeTTL": "0s"}, PluginContext())
