"""When an endpoint's metrics are too old to trust: one definition, and which threshold decides what.

Metrics are stale when their last successful scrape is older than a threshold (never scraped:
always stale). Two thresholds exist, as in the llm-d router, each with its own job and never
standing in for the other:

- ``--metrics-staleness-threshold`` (2 s, upstream's runner flag) is the picker's own view of its
  endpoints: ``inference_pool_ready_pods`` and the pool averages count only fresh endpoints
  (``datalayer/pool_gauges.py``), the epp.v1 Endpoints API marks the others ``metrics_stale``,
  and (beyond upstream) the health tiers serve fresh endpoints before stale ones
  (``requestcontrol/healthy.py``). The runtime builds one :class:`Staleness` from the flag and
  hands that same object to each of them.
- the ``utilization-detector``'s ``metricsStalenessThreshold`` (200 ms, a plugin parameter)
  decides admission: a stale endpoint counts as saturated, and its filter drops it. The flag
  does not change it, nor does it change the gauges: upstream keeps the two apart.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from epp.framework.endpoint import MetricsSnapshot

__all__ = ["FLAG_DEFAULT", "Staleness"]

_NEVER = math.ulp(0.0)
"""The smallest positive time: ``updated_at`` 0 (never scraped) is older than it."""


@dataclass(frozen=True, slots=True)
class Staleness:
    """Metrics older than ``threshold`` seconds (or never scraped) are stale."""

    threshold: float

    def __post_init__(self) -> None:
        if not self.threshold > 0:
            raise ValueError(f"a staleness threshold must be > 0, got {self.threshold}")

    def is_stale(self, metrics: MetricsSnapshot, now: float) -> bool:
        return metrics.age(now) > self.threshold

    def fresh_since(self, now: float) -> float:
        """The oldest ``updated_at`` that is still fresh at ``now``, for loops that compare many endpoints:
        ``metrics.updated_at >= fresh_since`` is exactly ``not is_stale(metrics, now)``."""
        return max(now - self.threshold, _NEVER)


FLAG_DEFAULT = Staleness(2.0)
"""``--metrics-staleness-threshold``'s default (upstream's), for parts built without the flag (tests, benchmarks)."""
