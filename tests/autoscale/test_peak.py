"""PeakSource: each pod's peak load over a window of cycles, so one quiet sample is not spare capacity."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from epp.autoscale.inputs import PodTarget
from epp.autoscale.peak import PeakSource
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import ManualClock

MODEL = "llama"


class _Scripted:
    """A metrics source that returns the next prepared readings each cycle."""

    def __init__(self, cycles: list[dict[str, tuple[float, float]]]) -> None:
        self._cycles = cycles

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> dict[str, ReplicaMetrics]:
        return {pod: ReplicaMetrics(pod, kv, q) for pod, (kv, q) in self._cycles.pop(0).items()}

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        return None


async def test_peak_source_reports_each_pods_peak_over_the_window() -> None:
    clock = ManualClock()
    inner = _Scripted([{"a": (0.7, 4)}, {"a": (0.2, 0), "b": (0.1, 1)}, {"a": (0.3, 0)}, {"b": (0.0, 0)}])
    source = PeakSource(inner, clock, window=10)
    key, pods = ModelKey("default", MODEL), [PodTarget("default", "a", "127.0.0.2", 8000)]
    assert await source.collect(key, pods) == {"a": ReplicaMetrics("a", 0.7, 4)}
    clock.advance(5)
    assert await source.collect(key, pods) == {"a": ReplicaMetrics("a", 0.7, 4), "b": ReplicaMetrics("b", 0.1, 1)}
    clock.advance(6)  # the first reading is now 11 s old
    assert await source.collect(key, pods) == {"a": ReplicaMetrics("a", 0.3, 0)}, "b did not report: not counted"
    clock.advance(1)
    assert await source.collect(key, pods) == {"b": ReplicaMetrics("b", 0.0, 0)}, "b's old peak was forgotten"
    with pytest.raises(ValueError, match="window"):
        PeakSource(inner, clock, window=0)
