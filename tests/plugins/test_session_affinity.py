"""session-affinity-scorer and session-affinity-filter: both strategies, their parameters, the token."""

from __future__ import annotations

import base64
import re

import pytest

from epp.clock import ManualClock
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest, attribute_key
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins import session_affinity_filter, session_affinity_scorer
from epp.plugins._session import decode_token, encode_token


def _state(name: str) -> EndpointState:
    return EndpointState(Endpoint(namespace="ns", name=name, pod_name=name, address="10.0.0.1", port=8000))


def _result(target: EndpointState, *, prefill: EndpointState | None = None) -> SchedulingResult:
    results: dict[str, ProfileResult | None] = {"decode": ProfileResult([target])}
    if prefill is not None:
        results["prefill"] = ProfileResult([prefill])
    return SchedulingResult(results, "decode")


def _request(rid: str = "r", **headers: str) -> InferenceRequest:
    return InferenceRequest(request_id=rid, headers={k.replace("_", "-"): v for k, v in headers.items()})


def test_token_is_upstreams_standard_base64_and_old_urlsafe_tokens_still_decode() -> None:
    key = "ns/pod-a-rank-0"
    assert encode_token(key) == base64.b64encode(key.encode()).decode()
    assert decode_token(encode_token(key)) == key
    unpadded_urlsafe = base64.urlsafe_b64encode(b"ns/\xff\xfe").decode().rstrip("=")
    assert decode_token(unpadded_urlsafe) is None  # not UTF-8
    assert decode_token(base64.urlsafe_b64encode(b"ns/p?>").decode().rstrip("=")) == "ns/p?>"
    assert decode_token("%%%") is None
    assert decode_token("") is None


def test_scorer_header_strategy_round_trip() -> None:
    scorer = session_affinity_scorer.create("s", {}, PluginContext())
    a, b = _state("a"), _state("b")
    headers = scorer.response_headers(_request(), _result(b))
    assert list(headers) == ["x-session-token"]
    back = _request("r2", x_session_token=headers["x-session-token"])
    assert scorer.score(CycleState(), back, [a, b]) == [0.0, 1.0]
    assert scorer.score(CycleState(), _request("r3"), [a, b]) == [0.0, 0.0]
    stale = _request("r4", x_session_token=encode_token("ns/gone"))
    assert scorer.score(CycleState(), stale, [a, b]) == [0.0, 0.0]


def test_filter_pins_the_session_endpoint_and_never_empties_the_set() -> None:
    flt = session_affinity_filter.create("f", {"encodedEndpointHeaderConfig": {"header": "X-Sticky"}}, PluginContext())
    a, b, c = _state("a"), _state("b"), _state("c")
    token = flt.response_headers(_request(), _result(b))["x-sticky"]
    assert flt.filter(CycleState(), _request(x_sticky=token), [a, b, c]) == [b]
    assert flt.filter(CycleState(), _request(x_sticky=token), [a, c]) == [a, c]  # its endpoint left
    assert flt.filter(CycleState(), _request(x_sticky="garbage!"), [a, c]) == [a, c]
    assert flt.filter(CycleState(), _request(), [a, b, c]) == [a, b, c]


def test_profile_name_pins_that_profiles_pick() -> None:
    flt = session_affinity_filter.create("f", {"profileName": "prefill"}, PluginContext())
    a, b = _state("a"), _state("b")
    token = flt.response_headers(_request(), _result(a, prefill=b))["x-session-token"]
    assert decode_token(token) == "ns/b"
    assert flt.response_headers(_request(), _result(a)) == {}  # the prefill profile did not run


def test_session_id_strategy_binds_on_routing_moves_only_when_absent_and_expires() -> None:
    clock = ManualClock()
    params = {"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": 30, "evictionSweepSeconds": 5}}
    flt = session_affinity_filter.create("f", params, PluginContext(clock=clock))
    a, b, c = _state("a"), _state("b"), _state("c")
    first = _request(x_session_id="s1")
    cycle = CycleState()
    assert flt.filter(cycle, first, [a, b, c]) == [a, b, c]  # unbound: no preference
    flt.pre_request(cycle, first, _result(b))
    assert flt.response_headers(first, _result(b)) == {}  # nothing goes back to the client
    again = _request("r2", x_session_id="s1")
    cycle = CycleState()
    assert flt.filter(cycle, again, [a, b, c]) == [b]
    flt.pre_request(cycle, again, _result(a))  # another pick while b was a candidate: the binding stays
    assert flt.filter(CycleState(), again, [a, b, c]) == [b]
    cycle = CycleState()
    assert flt.filter(cycle, again, [a, c]) == [a, c]  # b gone: no preference...
    flt.pre_request(cycle, again, _result(c))  # ...and the session moves to where it went
    assert flt.filter(CycleState(), again, [a, b, c]) == [c]
    assert flt.session.bindings == 1
    clock.advance(31)
    assert flt.filter(CycleState(), again, [a, b, c]) == [a, b, c]  # expired unused
    assert flt.session.bindings == 0


def test_session_id_sources_in_order_header_then_attribute() -> None:
    params = {
        "strategy": "session_id",
        "sessionIdConfig": {
            "sources": [{"header": "X-Conv"}, {"attribute": "session-id", "producer": "session-id-producer"}]
        },
    }
    scorer = session_affinity_scorer.create("s", params, PluginContext())
    a, b = _state("a"), _state("b")
    by_attribute = InferenceRequest(
        request_id="r", attributes={attribute_key("session-id", "session-id-producer"): "k"}
    )
    scorer.pre_request(CycleState(), by_attribute, _result(a))
    assert scorer.score(CycleState(), by_attribute, [a, b]) == [1.0, 0.0]
    by_header = _request("r2", x_conv="k")  # the same session id from the first source
    assert scorer.score(CycleState(), by_header, [a, b]) == [1.0, 0.0]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"strategy": "cookie"}, "strategy"),
        ({"strategy": "session_id", "sessionIdConfig": {"sources": [{"header": "a", "attribute": "b"}]}}, "sources[0]"),
        ({"strategy": "session_id", "sessionIdConfig": {"sources": [{}]}}, "sources[0]"),
        ({"strategy": "session_id", "sessionIdConfig": {"evictionTtlSeconds": -1}}, "evictionTtlSeconds"),
        ({"encodedEndpointHeaderConfig": {"headr": "x"}}, "encodedEndpointHeaderConfig"),
        ({"profilename": "prefill"}, "profilename"),
    ],
)
def test_bad_parameters_name_the_field(params: dict[str, object], field: str) -> None:
    for module in (session_affinity_filter, session_affinity_scorer):
        with pytest.raises(PluginConfigError, match=re.escape(field)):
            module.create("x", params, PluginContext())


def test_scorer_still_reads_its_older_header_name_parameter() -> None:
    scorer = session_affinity_scorer.create("s", {"headerName": "X-Sticky"}, PluginContext())
    assert scorer.session.header == "x-sticky"
    with pytest.raises(PluginConfigError, match="headerName"):
        session_affinity_scorer.create("s", {"headerName": ""}, PluginContext())
    with pytest.raises(PluginConfigError, match="headerName"):
        session_affinity_filter.create("f", {"headerName": "x"}, PluginContext())
