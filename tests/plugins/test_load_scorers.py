"""running-requests-size-scorer, token-load-scorer and active-request-scorer: formulas and parameters."""

from __future__ import annotations

from dataclasses import replace

import pytest
from scheduling_builders import request, state

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.scheduling import CycleState
from epp.plugins import inflight_load, inflight_scorers, running_requests_scorer


def _loaded(*, running: int = 0, requests: int = 0, tokens: int = 0, index: int = 0) -> EndpointState:
    s = state(index)
    s.metrics = replace(s.metrics, running=running)
    s.in_flight_requests, s.in_flight_tokens = requests, tokens
    return s


def test_running_requests_min_max() -> None:
    scorer = running_requests_scorer.create("r", {}, PluginContext())
    cands = [_loaded(running=n) for n in (2, 6, 4)]
    assert scorer.score(CycleState(), request(), cands) == [1.0, 0.0, 0.5]
    assert scorer.score(CycleState(), request(), [_loaded(running=3)] * 2) == [1.0, 1.0]


def test_token_load_against_the_threshold() -> None:
    scorer = inflight_scorers.create_token_load("t", {"queueThresholdTokens": 1000}, PluginContext())
    cands = [_loaded(tokens=n) for n in (0, 250, 1000, 5000)]
    assert scorer.score(CycleState(), request(), cands) == [1.0, 0.75, 0.0, 0.0]
    assert inflight_scorers.create_token_load("t", {}, PluginContext()).threshold == 4_194_304


def test_active_request_idle_and_busy() -> None:
    scorer = inflight_scorers.create_active_request("a", {"idleThreshold": 1, "maxBusyScore": 0.5}, PluginContext())
    cands = [_loaded(requests=n) for n in (0, 1, 2, 4)]
    assert scorer.score(CycleState(), request(), cands) == [1.0, 1.0, 0.25, 0.0]
    default = inflight_scorers.create_active_request("a", {}, PluginContext())
    assert default.score(CycleState(), request(), [_loaded(), _loaded()]) == [1.0, 1.0]  # nothing in flight


@pytest.mark.parametrize(
    ("create", "parameters", "message"),
    [
        (inflight_scorers.create_token_load, {"queueThresholdTokens": 0}, "queueThresholdTokens: must be >= 1"),
        (inflight_scorers.create_token_load, {"inFlightLoadProducerName": "x"}, "inFlightLoadProducerName"),
        (inflight_scorers.create_active_request, {"maxBusyScore": 2}, "maxBusyScore: must be <= 1.0"),
        (inflight_scorers.create_active_request, {"idleThreshold": -1}, "idleThreshold: must be >= 0"),
        (inflight_scorers.create_active_request, {"requestTimeout": "2m"}, "requestTimeout"),
        (inflight_load.create, {"outputRatio": -1}, "outputRatio: must be >= 0.0"),
        (inflight_load.create, {"maxEstimatedOutputTokens": -2}, "maxEstimatedOutputTokens: must be >= 0"),
        (running_requests_scorer.create, {"x": 1}, "x"),
    ],
)
def test_bad_parameters_are_refused_by_name(create: object, parameters: dict[str, object], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        create("p", parameters, PluginContext())  # type: ignore[operator]
