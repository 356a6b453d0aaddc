"""Each pod's peak load over a trailing window: upstream WVA's ``max_over_time[1m]``, without Prometheus.

Upstream reads ``max by (pod) (max_over_time(vllm:kv_cache_usage_perc[1m]))`` (and the same for
the waiting queue), so one quiet instant does not look like spare capacity.
:class:`~epp.autoscale.scrape.ScrapeSource` takes one instantaneous sample per cycle instead; with
direct actuation (no HPA stabilisation window) a steady load then flaps between N and N−1
replicas whenever a sample lands between requests (seen in ``epp dev --autoscale``).
:class:`PeakSource` wraps any
:class:`~epp.autoscale.inputs.MetricsSource` and reports, for each pod that answered this cycle,
the highest KV use and queue it reported during the last ``window`` seconds of cycles (per
instance: a data-parallel rank has its own peak); the instant KV use is kept for the throughput
analyzer, which wants the operating point, not the high-water mark.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import replace

from epp.autoscale.inputs import MetricsSource, ModelSignals, PodTarget
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import Clock

__all__ = ["PeakSource"]


class PeakSource:
    """Peak-over-``window`` readings from ``inner``; pods that stop reporting are forgotten."""

    def __init__(self, inner: MetricsSource, clock: Clock, *, window: float) -> None:
        if not window > 0:
            raise ValueError(f"window must be > 0 seconds, got {window!r}")
        self._inner = inner
        self._clock = clock
        self._window = window
        self._history: dict[ModelKey, dict[str, deque[tuple[float, ReplicaMetrics]]]] = {}

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> list[ReplicaMetrics]:
        readings = await self._inner.collect(key, pods)
        now = self._clock.now()
        previous = self._history.get(key, {})
        history: dict[str, deque[tuple[float, ReplicaMetrics]]] = {}
        out: list[ReplicaMetrics] = []
        for reading in readings:
            samples = previous.get(reading.key, deque())
            samples.append((now, reading))
            while samples[0][0] < now - self._window:
                samples.popleft()
            history[reading.key] = samples
            out.append(
                replace(
                    reading,
                    kv_cache_usage=max(r.kv_cache_usage for _, r in samples),
                    queue_length=max(r.queue_length for _, r in samples),
                    kv_instant=reading.k_now,  # the throughput analyzer's k* stays the instant value
                )
            )
        self._history[key] = history
        return out

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        return await self._inner.idle(key, pods, window)

    async def model_signals(self, key: ModelKey) -> ModelSignals | None:
        return await self._inner.model_signals(key)
