"""Counter totals seen cycle after cycle → the rates upstream reads from Prometheus, without Prometheus.

Upstream's PromQL (``rate(x[1m])``, ``rate(sum[5m]) / rate(count[5m])``) is computed here over the
samples the scraper kept: the increase across the window (a counter that goes down was reset and
counts from zero, as Prometheus counts it) divided by the time or by another counter's increase.
With fewer than two samples in a window the value is unknown (0), as an empty range is.

Windows are upstream's: the workload shape (average prompt and output tokens, prefix-cache hit
rate) over 5 minutes; inter-token latency, completed requests and generated tokens per second
over 1 minute.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import replace

from epp.autoscale.types import ReplicaMetrics

__all__ = ["SHAPE_WINDOW", "SPEED_WINDOW", "CounterWindow"]

SHAPE_WINDOW = 300.0
SPEED_WINDOW = 60.0


class CounterWindow:
    """One instance's counter totals over the last :data:`SHAPE_WINDOW` seconds."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, Mapping[str, float]]] = deque()

    def add(self, now: float, counters: Mapping[str, float]) -> None:
        self._samples.append((now, dict(counters)))
        while self._samples and self._samples[0][0] < now - SHAPE_WINDOW:
            self._samples.popleft()

    def _increase(self, name: str, window: float) -> tuple[float, float] | None:
        """``(increase, seconds)`` of counter ``name`` over the samples within ``window``."""
        if not self._samples:
            return None
        last_t = self._samples[-1][0]
        points = [(t, c[name]) for t, c in self._samples if t >= last_t - window and name in c]
        if len(points) < 2:
            return None
        total = 0.0
        for (_, a), (_, b) in zip(points, points[1:], strict=False):
            total += b - a if b >= a else b  # a reset counts from zero
        return total, points[-1][0] - points[0][0]

    def _ratio(self, num: str, den: str, window: float) -> float:
        top, bottom = self._increase(num, window), self._increase(den, window)
        if top is None or bottom is None or bottom[0] <= 0:
            return 0.0
        return top[0] / bottom[0]

    def _per_second(self, name: str, window: float) -> float:
        inc = self._increase(name, window)
        if inc is None or inc[1] <= 0:
            return 0.0
        return inc[0] / inc[1]

    def shaped(self, reading: ReplicaMetrics) -> ReplicaMetrics:
        """``reading`` with the workload shape and speed this window says (0: unknown)."""
        return replace(
            reading,
            avg_input_tokens=self._ratio("prompt_sum", "prompt_count", SHAPE_WINDOW),
            avg_output_tokens=self._ratio("gen_sum", "gen_count", SHAPE_WINDOW),
            prefix_hit_rate=min(1.0, self._ratio("hits", "queries", SHAPE_WINDOW)),
            avg_itl=self._ratio("itl_sum", "itl_count", SPEED_WINDOW),
            request_rate=self._per_second("gen_count", SPEED_WINDOW),
            generation_rate=self._per_second("gen_sum", SPEED_WINDOW),
        )

    def rose(self, name: str) -> bool:
        """True when counter ``name`` went up between the last two samples."""
        if len(self._samples) < 2:
            return False
        before, after = self._samples[-2][1].get(name), self._samples[-1][1].get(name)
        return before is not None and after is not None and after != before
