"""header-profile-handler, probabilistic-admitter and request-attribute-reporter, as plugins."""

from __future__ import annotations

import random

import pytest
from scheduling_builders import state

from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.response import CompletedResponse, Usage
from epp.framework.scheduling import CycleState, ProfileResult
from epp.plugins import header_profile_handler, probabilistic_admitter, request_attribute_reporter

PROFILES = {"encode": object(), "prefill": object(), "decode": object()}


def _pick(
    handler: header_profile_handler.HeaderProfileHandler, profiles: dict[str, object], **headers: str
) -> list[str]:
    request = InferenceRequest(request_id="r", headers=headers)
    return handler.pick_profiles(CycleState(), request, profiles, {})  # type: ignore[arg-type]


def test_header_profile_handler_runs_the_named_profile_else_the_default() -> None:
    handler = header_profile_handler.create("h", {}, PluginContext())
    assert _pick(handler, PROFILES, **{"epp-profile": " prefill "}) == ["prefill"]
    assert _pick(handler, PROFILES) == ["decode"]
    assert _pick(handler, PROFILES, **{"epp-profile": "verify"}) == []  # unknown: nothing runs (429 upstream)
    assert _pick(handler, {"only": object()}, **{"epp-profile": "verify"}) == ["only"]
    custom = header_profile_handler.create("h", {"headerName": "X-Stage", "defaultProfile": "encode"}, PluginContext())
    assert _pick(custom, PROFILES, **{"x-stage": "decode"}) == ["decode"]
    assert _pick(custom, PROFILES) == ["encode"]
    assert _pick(custom, {"prefill": object(), "decode": object()}) == []  # the default is not a profile
    ran = {"prefill": ProfileResult([state(1)])}
    assert handler.pick_profiles(CycleState(), InferenceRequest(request_id="r"), PROFILES, ran) == []  # type: ignore[arg-type]
    assert handler.process_results(CycleState(), InferenceRequest(request_id="r"), ran).primary_profile == "prefill"
    with pytest.raises(PluginConfigError, match="headername"):
        header_profile_handler.create("h", {"headername": "x"}, PluginContext())


class _Draw(random.Random):
    """A generator that always draws ``value``."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def _admitter(draw: float, **params: float) -> probabilistic_admitter.ProbabilisticAdmitter:
    admitter = probabilistic_admitter.create("a", params, PluginContext())
    admitter._rng = _Draw(draw)
    return admitter


def test_probabilistic_admitter_sheds_sheddable_work_by_the_saturation_curve() -> None:
    pods = [state(1, queue=1), state(2, kv=0.24)]  # max(0.2, 0) and max(0, 0.3): saturation 0.25
    sheddable = InferenceRequest(request_id="r", priority=-1)
    assert _admitter(0.0).saturation(pods) == pytest.approx(0.25)
    probability = 0.25**5 * 300  # ≈ 0.293
    denial = _admitter(probability - 0.01).admit(sheddable, pods)
    assert denial is not None and denial.code == "ResourceExhausted"
    assert str(denial) == (
        "inference error: ResourceExhausted - probabilistic-admitter: rejected, saturation=0.250 prob=0.29"
    )
    assert _admitter(probability + 0.01).admit(sheddable, pods) is None
    assert _admitter(0.0).admit(InferenceRequest(request_id="r", priority=0), [state(1, queue=50)]) is None
    assert _admitter(0.0).admit(sheddable, []) is None  # no candidates: admitted
    assert _admitter(0.99).admit(sheddable, [state(1, queue=20)]) is not None  # saturation 4: certain
    assert _admitter(0.5, power=1.0, k=1.0).admit(sheddable, pods) is None  # p = 0.25
    with pytest.raises(PluginConfigError, match="power"):
        probabilistic_admitter.create("a", {"power": 0}, PluginContext())
    with pytest.raises(PluginConfigError, match="queueDepthThreshold"):
        probabilistic_admitter.create("a", {"queueDepthThreshold": 0}, PluginContext())


def _reporter(expression: str, condition: str = "", **key: str) -> request_attribute_reporter.RequestAttributeReporter:
    attribute = {"key": {"name": "x-gateway-inference-request-cost", **key}, "expression": expression}
    if condition:
        attribute["condition"] = condition
    return request_attribute_reporter.create("r", {"attributes": [attribute]}, PluginContext())


def _metadata(
    reporter: request_attribute_reporter.RequestAttributeReporter, usage: Usage
) -> dict[str, dict[str, float]]:
    response = CompletedResponse(usage)
    reporter.response_complete(InferenceRequest(request_id="r"), response)
    return response.dynamic_metadata


def test_request_attribute_reporter_evaluates_cel_over_usage() -> None:
    total = _reporter("usage.prompt_tokens + usage.completion_tokens", "has(usage.completion_tokens)")
    assert _metadata(total, Usage(3, 4, 0, 7)) == {"envoy.lb": {"x-gateway-inference-request-cost": 7.0}}
    assert _metadata(total, Usage()) == {}  # zero is not reported
    custom = _reporter("usage.completion_tokens * 2.5", namespace="billing")
    assert _metadata(custom, Usage(0, 3)) == {"billing": {"x-gateway-inference-request-cost": 7.0}}  # 7.5 truncated
    cached = _reporter("usage.prompt_tokens_details.cached_tokens", "has(usage.prompt_tokens_details)")
    assert _metadata(cached, Usage(10, 1, 6, 11)) == {"envoy.lb": {"x-gateway-inference-request-cost": 6.0}}
    assert _metadata(cached, Usage(10, 1)) == {}  # no cached tokens reported: the condition is false
    assert _metadata(_reporter("usage.prompt_tokens + 1"), Usage(3)) == {}  # double + int: no overload, as upstream
    assert _metadata(_reporter("usage.missing"), Usage(3)) == {}  # an evaluation error reports nothing
    assert _metadata(_reporter("'text'"), Usage(3)) == {}  # not a number


@pytest.mark.parametrize(
    ("attributes", "field"),
    [
        ([], "exactly one entry"),
        ([{"key": {"name": "a"}, "expression": "1"}, {"key": {"name": "b"}, "expression": "2"}], "exactly one entry"),
        ([{"key": {}, "expression": "1"}], "key.name"),
        ([{"key": {"name": "a"}}], "expression"),
        ([{"key": {"name": "a"}, "expression": "usage.prompt_tokens +"}], "attributes[0].expression: does not compile"),
        ([{"key": {"name": "a"}, "expression": "1", "condition": "has("}], "attributes[0].condition: does not compile"),
        ([{"key": {"name": "a", "ns": "x"}, "expression": "1"}], "key: unknown field"),
    ],
)
def test_request_attribute_reporter_refuses_bad_configuration(attributes: list[object], field: str) -> None:
    with pytest.raises(PluginConfigError, match=field.replace("[", r"\[").replace("]", r"\]")):
        request_attribute_reporter.create("r", {"attributes": attributes}, PluginContext())
