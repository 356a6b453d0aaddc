"""The memory soak's slope: bytes per request from (requests, RSS) samples, warm-up left out."""

from __future__ import annotations

import pytest

from epp_sim.bench.overhead.memory import rss_slope


def test_a_steady_leak_is_its_bytes_per_request_after_the_warm_up() -> None:
    warm_up = [(0, 50_000_000), (1_000, 60_000_000)]  # caches filling: steep, and left out
    leak = [(n, 60_000_000 + 100 * (n - 1_000)) for n in range(2_000, 20_001, 2_000)]
    assert rss_slope(warm_up + leak) == pytest.approx(100.0)


def test_flat_memory_is_zero_and_too_few_samples_is_none() -> None:
    assert rss_slope([(n, 80_000_000) for n in range(0, 10_000, 1_000)]) == pytest.approx(0.0)
    assert rss_slope([(10, 1), (20, 2)]) is None
    assert rss_slope([]) is None
