"""PeakSource: each instance's peak load over a window of cycles, so one quiet sample is not spare capacity."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from epp.autoscale.inputs import ModelSignals, PodTarget
from epp.autoscale.peak import PeakSource
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import ManualClock

MODEL = "llama"


class _Scripted:
    """A metrics source that returns the next prepared readings each cycle."""

    def __init__(self, cycles: list[dict[str, tuple[float, float]]]) -> None:
        self._cycles = cycles

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> list[ReplicaMetrics]:
        return [ReplicaMetrics(i.split(":")[0], kv, q, instance=i) for i, (kv, q) in self._cycles.pop(0).items()]

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        return None

    async def model_signals(self, key: ModelKey) -> ModelSignals | None:
        return ModelSignals(queue_size=2)


def _peaks(readings: list[ReplicaMetrics]) -> dict[str, tuple[float, float, float]]:
    return {r.key: (r.kv_cache_usage, r.queue_length, r.k_now) for r in readings}


async def test_peak_source_reports_each_instances_peak_over_the_window() -> None:
    clock = ManualClock()
    inner = _Scripted(
        [{"a": (0.7, 4)}, {"a": (0.2, 0), "b:0": (0.1, 1), "b:1": (0.5, 2)}, {"a": (0.3, 0)}, {"b:0": (0.0, 0)}]
    )
    source = PeakSource(inner, clock, window=10)
    key, pods = ModelKey("default", MODEL), [PodTarget("default", "a", "127.0.0.2", 8000)]
    assert _peaks(await source.collect(key, pods)) == {"a": (0.7, 4, 0.7)}
    clock.advance(5)
    # the peak for scaling, the instant value kept for the throughput analyzer's operating point
    assert _peaks(await source.collect(key, pods)) == {"a": (0.7, 4, 0.2), "b:0": (0.1, 1, 0.1), "b:1": (0.5, 2, 0.5)}
    clock.advance(6)  # the first reading is now 11 s old
    assert _peaks(await source.collect(key, pods)) == {"a": (0.3, 0, 0.3)}, "b did not report: not counted"
    clock.advance(1)
    assert _peaks(await source.collect(key, pods)) == {"b:0": (0.0, 0, 0.0)}, "b's old peak was forgotten"
    assert await source.model_signals(key) == ModelSignals(queue_size=2)
    with pytest.raises(ValueError, match="window"):
        PeakSource(inner, clock, window=0)
