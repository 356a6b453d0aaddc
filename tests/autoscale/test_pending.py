"""Pending replicas: upstream's formula, clamping, FIFO ages and the timeout on a ManualClock."""

from __future__ import annotations

import pytest

from epp.autoscale.pending import PendingTracker, replica_counts
from epp.autoscale.types import VariantKey
from epp.clock import ManualClock

KEY = VariantKey("ns", "va")


@pytest.mark.parametrize(
    ("spec", "status", "ready", "expected"),
    [
        (3, 3, 2, (3, 1)),
        (3, 0, 0, (3, 3)),  # status.replicas 0 → spec is used
        (2, 3, 2, (3, 1)),  # surge: status above spec counts
        (3, 2, 3, (2, 0)),  # ready above current is clamped to 0
        (0, 0, 0, (0, 0)),
    ],
)
def test_replica_counts(spec: int, status: int, ready: int, expected: tuple[int, int]) -> None:
    assert replica_counts(spec_replicas=spec, status_replicas=status, ready_replicas=ready) == expected


def test_pending_blocks_until_timeout() -> None:
    clock = ManualClock()
    t = PendingTracker(timeout=600)
    assert t.observe(KEY, 1, clock.now()).blocking == 1
    clock.advance(599)
    s = t.observe(KEY, 1, clock.now())
    assert (s.pending, s.blocking, s.oldest_age) == (1, 1, 599)
    clock.advance(1)
    s = t.observe(KEY, 1, clock.now())
    assert (s.pending, s.blocking, s.timed_out) == (1, 0, 1)


def test_new_pending_replica_blocks_again_after_timeout_fired() -> None:
    clock = ManualClock()
    t = PendingTracker(timeout=600)
    t.observe(KEY, 1, clock.now())
    clock.advance(700)
    assert t.observe(KEY, 2, clock.now()).blocking == 1  # the new one is young
    clock.advance(600)
    assert t.observe(KEY, 2, clock.now()).blocking == 0


def test_ready_replicas_drop_the_oldest_stamps_first() -> None:
    clock = ManualClock()
    t = PendingTracker(timeout=600)
    t.observe(KEY, 1, clock.now())
    clock.advance(300)
    t.observe(KEY, 2, clock.now())
    clock.advance(100)
    s = t.observe(KEY, 1, clock.now())  # one became Ready: the older stamp goes
    assert s.oldest_age == 100
    assert t.observe(KEY, 0, clock.now()).pending == 0


def test_hold_until_reached_or_timeout() -> None:
    clock = ManualClock()
    t = PendingTracker(timeout=600)
    assert t.hold(KEY, previous_target=3, current=2, now=clock.now()).target == 3
    clock.advance(599)
    assert t.hold(KEY, previous_target=3, current=2, now=clock.now()).target == 3
    clock.advance(1)
    h = t.hold(KEY, previous_target=3, current=2, now=clock.now())
    assert (h.target, h.expired) == (None, True)
    assert t.hold(KEY, previous_target=4, current=2, now=clock.now()).target == 4  # new target, new hold
    assert t.hold(KEY, previous_target=4, current=4, now=clock.now()).target is None
    assert t.hold(KEY, previous_target=0, current=4, now=clock.now()).target is None  # never decided


def test_retain_forgets_deleted_variants() -> None:
    t = PendingTracker(timeout=10)
    t.observe(KEY, 1, 0.0)
    t.retain([])
    assert t.observe(KEY, 1, 100.0).blocking == 1  # fresh stamp: the old one was forgotten


def test_timeout_must_be_positive() -> None:
    with pytest.raises(ValueError, match="pending timeout must be > 0"):
        PendingTracker(timeout=0)
