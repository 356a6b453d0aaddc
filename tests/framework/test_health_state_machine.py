"""The endpoint health state machine: each event moves it as the module's docstring says."""

from __future__ import annotations

import pytest

from epp.framework.health import EndpointHealth, Health, HealthPolicy

Seen = list[tuple[Health, Health, str]]


def tracked(**policy: float) -> tuple[EndpointHealth, Seen]:
    seen: Seen = []
    health = EndpointHealth(
        "ns/pod-rank-0",
        HealthPolicy(on_transition=lambda h, old, new, reason: seen.append((old, new, reason)), **policy),  # type: ignore[arg-type]
    )
    return health, seen


def test_refused_scrape_is_unreachable_at_once_and_one_good_scrape_brings_it_back() -> None:
    health, seen = tracked()
    health.unreachable("scrape connect: refused", now=10.0)
    assert health.state is Health.UNREACHABLE and not health.routable(10.0)
    health.unreachable("again", now=10.05)  # no new transition while it stays down
    health.scrape_ok(10.1)
    assert health.state is Health.HEALTHY and health.routable(10.1)
    assert [(old, new) for old, new, _ in seen] == [
        (Health.HEALTHY, Health.UNREACHABLE),
        (Health.UNREACHABLE, Health.HEALTHY),
    ]
    assert seen[0][2] == "scrape connect: refused"


def test_timeout_or_non_200_is_suspect_but_routable() -> None:
    health, seen = tracked()
    health.scrape_failed("scrape timeout")
    assert health.state is Health.SUSPECT and health.routable(0.0)
    health.scrape_failed("scrape http")
    assert len(seen) == 1
    health.scrape_ok(1.0)
    assert health.state is Health.HEALTHY


def test_consecutive_failed_responses_eject_for_the_back_off_then_one_success_returns_it() -> None:
    health, seen = tracked(consecutive_failures=3, base_ejection=1.0)
    health.response_failed("HTTP 503", 5.0)
    health.response_ok(5.0, health.epoch)  # a success in between resets the count
    health.response_failed("HTTP 503", 5.0)
    health.response_failed("HTTP 503", 5.0)
    assert health.state is Health.HEALTHY
    health.response_failed("HTTP 500", 5.1)
    assert health.state is Health.EJECTED and not health.routable(5.1)
    assert "3 failed responses in a row, last: HTTP 500" in seen[-1][2]
    health.scrape_ok(5.5)  # metrics answer, but the back-off is not over
    assert health.state is Health.EJECTED and not health.routable(5.5)
    assert health.routable(6.1)  # back-off over: routable again, not yet proven
    health.scrape_ok(6.2)
    assert health.state is Health.HEALTHY


def test_a_flapping_endpoint_is_held_out_longer_each_fall() -> None:
    health, _ = tracked(consecutive_failures=1, base_ejection=1.0, max_ejection=4.0)
    now = 0.0
    holds = []
    for _ in range(5):
        health.response_failed("HTTP 500", now)
        holds.append(health.until - now)
        now = health.until
        health.response_ok(now, health.epoch)
        assert health.state is Health.HEALTHY
    assert holds == [1.0, 2.0, 4.0, 4.0, 4.0]
    # In service for longer than max_ejection since the last hold ended: the next fall starts over.
    health.response_failed("HTTP 500", now + 4.5)
    assert health.until - (now + 4.5) == 1.0


def test_refused_scrapes_that_keep_coming_back_are_held_too() -> None:
    health, _ = tracked(base_ejection=1.0)
    health.unreachable("refused", 0.0)
    health.scrape_ok(0.05)  # first fall: back at the first good scrape
    assert health.state is Health.HEALTHY
    health.unreachable("refused", 0.1)
    health.scrape_ok(0.15)  # second fall in a row: held out for the base back-off
    assert health.state is Health.EJECTED and not health.routable(0.15)
    health.scrape_ok(1.2)
    assert health.state is Health.HEALTHY


def test_stragglers_after_a_fall_change_nothing() -> None:
    health, seen = tracked(consecutive_failures=1)
    health.unreachable("refused", 0.0)
    health.unreachable("refused", 0.0)
    health.response_failed("HTTP 503", 0.01)
    health.scrape_ok(0.05)
    health.response_failed("HTTP 503", 0.06)  # now routable again: this one counts
    assert [new for _, new, _ in seen] == [Health.UNREACHABLE, Health.HEALTHY, Health.EJECTED]


def test_refused_while_ejected_is_the_same_fall() -> None:
    health, _ = tracked(consecutive_failures=1, base_ejection=1.0)
    health.response_failed("HTTP 503", 0.0)
    health.unreachable("refused", 0.1)
    assert health.state is Health.UNREACHABLE and health.falls == 1 and health.until == 1.0


@pytest.mark.parametrize(
    "policy", [{"consecutive_failures": 0}, {"base_ejection": 0.0}, {"base_ejection": 5.0, "max_ejection": 1.0}]
)
def test_bad_policies_are_refused(policy: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        HealthPolicy(**policy)  # type: ignore[arg-type]


def test_a_success_routed_before_the_latest_trouble_is_a_straggler() -> None:
    health, _ = tracked()
    routed_healthy = health.epoch
    health.unreachable("scrape connect: refused", 1.0)
    health.response_ok(1.1, routed_healthy)  # the dead pod answered it before it died
    assert health.state is Health.UNREACHABLE
    routed_out = health.epoch  # fail-open: routed there while out
    health.response_ok(1.2, routed_out)
    assert health.state is Health.HEALTHY
    routed_healthy = health.epoch
    health.scrape_failed("scrape timeout")
    health.response_ok(1.3, routed_healthy)
    assert health.state is Health.SUSPECT
