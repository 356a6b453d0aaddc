"""Pending replicas, their ages, and the pending timeout (our extension beyond upstream WVA).

``pending = status.replicas − status.readyReplicas`` (``spec.replicas`` while ``status.replicas``
is 0), never negative: upstream's ``BuildVariantStates``. A variant with pending replicas gets no
further scale-up (no cascade while models load); scale-down is unaffected.

Upstream has no timeout, so a pod stuck Pending (no free GPU) blocks scale-up forever. Here a
pending replica older than ``timeout`` stops blocking. Ages come from the counts: when pending
rises by k, k entries stamped "now" are appended; when it falls, the oldest entries go first
(pods usually become Ready in creation order). If a stuck pod outlives a younger one, the younger
stamp survives, so the timeout fires later, never earlier: the error is on the safe side.

The same timeout bounds the *cooldown hold*: a previous target the Deployment has not reached yet
(HPA lag, or a ReplicaSet that cannot create pods) holds the variant, but not forever.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from epp.autoscale.types import VariantKey

__all__ = ["DEFAULT_PENDING_TIMEOUT", "HoldState", "PendingState", "PendingTracker", "replica_counts"]

DEFAULT_PENDING_TIMEOUT = 600.0


def replica_counts(*, spec_replicas: int, status_replicas: int, ready_replicas: int) -> tuple[int, int]:
    """``(current, pending)`` of a Deployment, exactly as upstream computes them."""
    current = status_replicas if status_replicas > 0 else spec_replicas
    return current, max(0, current - ready_replicas)


@dataclass(frozen=True, slots=True)
class PendingState:
    """Pending replicas of one variant: how many, how many still block scale-up, the oldest age."""

    pending: int = 0
    blocking: int = 0
    oldest_age: float = 0.0

    @property
    def timed_out(self) -> int:
        return self.pending - self.blocking


@dataclass(frozen=True, slots=True)
class HoldState:
    """A previous target not yet reached: ``target`` while held, ``None`` once reached or expired."""

    target: int | None = None
    age: float = 0.0
    expired: bool = False


class PendingTracker:
    """Per-variant pending ages and cooldown holds, on the controller's clock."""

    def __init__(self, timeout: float = DEFAULT_PENDING_TIMEOUT) -> None:
        if timeout <= 0:
            raise ValueError(f"pending timeout must be > 0 seconds, got {timeout}")
        self.timeout = timeout
        self._since: dict[VariantKey, list[float]] = {}
        self._holds: dict[VariantKey, tuple[int, float]] = {}

    def observe(self, key: VariantKey, pending: int, now: float) -> PendingState:
        """Record this cycle's pending count and age the pending replicas."""
        stamps = self._since.setdefault(key, [])
        if pending > len(stamps):
            stamps.extend([now] * (pending - len(stamps)))
        elif pending < len(stamps):
            del stamps[: len(stamps) - pending]
        if not stamps:
            del self._since[key]
            return PendingState()
        blocking = sum(1 for t in stamps if now - t < self.timeout)
        return PendingState(pending=pending, blocking=blocking, oldest_age=now - stamps[0])

    def hold(self, key: VariantKey, *, previous_target: int, current: int, now: float) -> HoldState:
        """Hold at ``previous_target`` while the Deployment has not reached it, up to the timeout."""
        if previous_target <= 0 or previous_target == current:
            self._holds.pop(key, None)
            return HoldState()
        target, since = self._holds.get(key, (previous_target, now))
        if target != previous_target:
            since = now
        self._holds[key] = (previous_target, since)
        age = now - since
        if age >= self.timeout:
            return HoldState(age=age, expired=True)
        return HoldState(target=previous_target, age=age)

    def retain(self, keys: Iterable[VariantKey]) -> None:
        """Forget variants that no longer exist."""
        keep = set(keys)
        for table in (self._since, self._holds):
            for key in [k for k in table if k not in keep]:
                del table[key]
