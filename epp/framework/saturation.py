"""Saturation: one definition shared by admission, the utilization filter and the autoscaler.

An endpoint is saturated when its waiting queue or KV-cache use reaches a threshold, or when its
metrics are older than the staleness threshold (we cannot vouch for a pod we have not heard from).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from epp.framework.endpoint import EndpointState

__all__ = ["SaturationDetector", "Thresholds"]


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Upstream defaults: queue 5, KV 0.8, staleness 200 ms, headroom 0."""

    queue_depth: int = 5
    kv_cache_util: float = 0.8
    staleness_seconds: float = 0.2
    headroom: float = 0.0

    def __post_init__(self) -> None:
        if self.queue_depth <= 0:
            raise ValueError(f"queueDepthThreshold must be > 0, got {self.queue_depth}")
        if not 0.0 < self.kv_cache_util <= 1.0:
            raise ValueError(f"kvCacheUtilThreshold must be in (0, 1], got {self.kv_cache_util}")
        if self.staleness_seconds <= 0:
            raise ValueError(f"metricsStalenessThreshold must be > 0, got {self.staleness_seconds}")
        if self.headroom < 0:
            raise ValueError(f"headroom must be >= 0, got {self.headroom}")


@runtime_checkable
class SaturationDetector(Protocol):
    """Decides whether endpoints (and so a pool) can take more sheddable work."""

    def is_saturated(self, state: EndpointState, now: float) -> bool: ...

    def utilization(self, state: EndpointState, now: float) -> float:
        """``max(queue/queueThreshold, kv/kvThreshold)``; 1.0 for stale metrics."""
        ...

    def all_saturated(self, candidates: Sequence[EndpointState], now: float) -> bool:
        """True when no candidate has room (and when there are no candidates)."""
        ...
