"""Endpoint health: one small state machine per endpoint, from what the picker already sees.

A vLLM pod that crashes, hangs or fails stays Ready in the API for 10–30 s, and its last
metrics (often the best of the pool) would keep attracting the pool's traffic. The picker sees
the trouble long before the kubelet does: its scraper is refused or times out, and Envoy answers
the requests it routed there with 5xx. This module turns those events into one state per
endpoint, read by scheduling, admission and the fallback list:

- ``healthy``: routable;
- ``suspect``: a scrape timed out or answered non-200; routable, never preferred (a good scrape
  clears it);
- ``unreachable``: a scrape was refused, reset or could not resolve, or Envoy itself answered a
  request routed there with 502/503 (not the model server: it could not connect, or was reset);
  not routable until a scrape or response succeeds;
- ``ejected``: ``consecutive_failures`` routed requests in a row failed (5xx); not routable for a
  back-off, as Envoy's outlier detection ejects a host. Once the back-off is over, one good
  scrape or response brings it back.

Flapping: every fall out of service (unreachable or ejected) within ``max_ejection`` seconds of
the end of the previous hold counts one more in a row, and the endpoint is then held out for
``base_ejection × 2^(n−1)`` (capped at ``max_ejection``); a first refused scrape holds it for
nothing (the next good scrape brings it back), so only a pod that keeps falling pays, and it can
oscillate no faster than its back-off. Staleness (metrics older than
``--metrics-staleness-threshold``) is a matter of time, not of events, and the reader checks it.

Everything runs on the event loop; each event is a few attribute reads, and a healthy endpoint's
good scrape or response returns at the first test.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["EndpointHealth", "Health", "HealthPolicy", "Transition"]


class Health(enum.Enum):
    """An endpoint's health state; the value is the ``state`` label of its gauge."""

    HEALTHY = "healthy"
    SUSPECT = "suspect"
    UNREACHABLE = "unreachable"
    EJECTED = "ejected"


Transition = Callable[["EndpointHealth", Health, Health, str], None]
"""Told of every change: (health, old state, new state, reason); metrics and the log line."""


def _ignore(health: EndpointHealth, old: Health, new: Health, reason: str) -> None:
    """The listener of endpoints nobody observes (tests, the autoscaler's scratch states)."""


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    """Thresholds of the state machine, shared by a pool's endpoints; ``on_transition`` reports changes."""

    consecutive_failures: int = 3
    base_ejection: float = 1.0
    max_ejection: float = 30.0
    on_transition: Transition = _ignore

    def __post_init__(self) -> None:
        if self.consecutive_failures < 1:
            raise ValueError(f"consecutive_failures must be >= 1, got {self.consecutive_failures}")
        if not 0 < self.base_ejection <= self.max_ejection:
            raise ValueError(f"need 0 < base_ejection ({self.base_ejection}) <= max_ejection ({self.max_ejection})")

    def hold(self, falls: int, *, ejected: bool) -> float:
        """Seconds out of service for the ``falls``-th fall in a row."""
        doublings = falls - 1 if ejected else falls - 2
        if doublings < 0:
            return 0.0
        return min(self.base_ejection * 2.0**doublings, self.max_ejection)


class EndpointHealth:
    """The health of one endpoint; ``key`` names it to the listener."""

    __slots__ = ("key", "state", "reason", "failures", "falls", "until", "epoch", "_policy")

    def __init__(self, key: str, policy: HealthPolicy | None = None) -> None:
        self.key = key
        self.state = Health.HEALTHY
        self.reason = ""
        self.failures = 0  # consecutive failed responses
        self.falls = 0  # falls out of service in a row (the back-off's exponent)
        self.until = 0.0  # end of the current hold (clock seconds)
        # One more at every move into (or within) trouble: a response to a request routed at an
        # earlier epoch says nothing about the endpoint now (see ``response_ok``).
        self.epoch = 0
        self._policy = policy or HealthPolicy()

    def __repr__(self) -> str:
        return f"EndpointHealth({self.key} {self.state.value} {self.reason!r})"

    def routable(self, now: float) -> bool:
        """Whether requests may go there (suspect ones included; staleness is the reader's)."""
        state = self.state
        return state is Health.HEALTHY or state is Health.SUSPECT or (state is Health.EJECTED and now >= self.until)

    # -- scrapes -------------------------------------------------------------------------------

    def scrape_ok(self, now: float) -> None:
        """A scrape answered 200 with metrics."""
        if self.state is Health.HEALTHY:
            return
        if now >= self.until:
            self._move(Health.HEALTHY, "scrape succeeded")
        elif self.state is not Health.EJECTED:  # answering again, but still held out for its back-off
            self._move(Health.EJECTED, f"answering again, held out for {self.until - now:.1f}s more")

    def unreachable(self, reason: str, now: float) -> None:
        """Nothing answers there: a scrape was refused, reset or could not resolve, or Envoy itself
        answered a routed request with 502/503 (it could not connect, or was reset): unreachable at once."""
        state = self.state
        if state is Health.UNREACHABLE:
            return
        if state is Health.EJECTED and now < self.until:
            self._move(Health.UNREACHABLE, reason)  # the same fall, now with a reason to match
        else:
            self._fall(Health.UNREACHABLE, reason, now)

    def scrape_failed(self, reason: str) -> None:
        """A scrape timed out or answered non-200: suspect, unless already out of service."""
        if self.state is Health.HEALTHY:
            self._move(Health.SUSPECT, reason)

    # -- responses -----------------------------------------------------------------------------

    def response_ok(self, now: float, epoch: int) -> None:
        """A request routed there at ``epoch`` got a non-5xx answer.

        One routed before the latest trouble is a straggler: a pod that answered it and then died
        (or froze) must not be brought back by that answer reaching us after its fall.
        """
        if self.state is Health.HEALTHY:
            self.failures = 0
            return
        if epoch != self.epoch:
            return
        self.failures = 0
        if now >= self.until:
            self._move(Health.HEALTHY, "response succeeded")

    def response_failed(self, reason: str, now: float) -> None:
        """A request routed there failed (5xx from Envoy or the model server)."""
        if not self.routable(now):
            return  # stragglers routed before it fell change nothing
        self.failures += 1
        if self.failures >= self._policy.consecutive_failures:
            self._fall(Health.EJECTED, f"{self.failures} failed responses in a row, last: {reason}", now)

    # -- transitions ---------------------------------------------------------------------------

    def _fall(self, state: Health, reason: str, now: float) -> None:
        policy = self._policy
        if self.falls and now - self.until > policy.max_ejection:
            self.falls = 0  # in service long enough since the last hold: start over
        self.falls += 1
        hold = policy.hold(self.falls, ejected=state is Health.EJECTED)
        self.until = max(self.until, now + hold)
        self.failures = 0
        if hold:
            reason = f"{reason}; held out for {hold:g}s (fall {self.falls} in a row)"
        self._move(state, reason)

    def _move(self, state: Health, reason: str) -> None:
        old = self.state
        self.state = state
        self.reason = reason
        if state is not Health.HEALTHY:
            self.epoch += 1
        self._policy.on_transition(self, old, state, reason)
