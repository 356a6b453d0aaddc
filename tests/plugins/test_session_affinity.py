"""session-affinity-scorer: the token round trip and scoring."""

from __future__ import annotations

import pytest

from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins import session_affinity_scorer
from epp.plugins.session_affinity_scorer import SessionAffinityScorer, decode_token, encode_token


def _state(name: str) -> EndpointState:
    return EndpointState(Endpoint(namespace="ns", name=name, pod_name=name, address="10.0.0.1", port=8000))


def test_token_round_trip_and_garbage() -> None:
    assert decode_token(encode_token("ns/pod-rank-0")) == "ns/pod-rank-0"
    assert decode_token("%%%") is None
    assert decode_token("\u00ff") is None


def test_returning_client_scores_its_endpoint() -> None:
    scorer = SessionAffinityScorer("s")
    cands = [_state("a"), _state("b")]
    result = SchedulingResult({"default": ProfileResult([cands[1]])}, "default")
    headers = scorer.response_headers(InferenceRequest(request_id="r"), result)
    assert list(headers) == ["x-session-token"]
    back = InferenceRequest(request_id="r2", headers={"x-session-token": headers["x-session-token"]})
    assert scorer.score(CycleState(), back, cands) == [0.0, 1.0]
    assert scorer.score(CycleState(), InferenceRequest(request_id="r3"), cands) == [0.0, 0.0]
    stale = InferenceRequest(request_id="r4", headers={"x-session-token": encode_token("ns/gone")})
    assert scorer.score(CycleState(), stale, cands) == [0.0, 0.0]


def test_factory() -> None:
    assert session_affinity_scorer.create("s", {"headerName": "X-Sticky"}, PluginContext()).header == "x-sticky"
    with pytest.raises(PluginConfigError, match="headerName"):
        session_affinity_scorer.create("s", {"headerName": ""}, PluginContext())
