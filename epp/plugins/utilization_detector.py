"""utilization-detector: the saturation detector (admission) and a filter that sheds hot endpoints.

An endpoint is saturated when its waiting queue reaches ``queueDepthThreshold``, its KV-cache
use reaches ``kvCacheUtilThreshold``, or its metrics are older than ``metricsStalenessThreshold``
(we cannot vouch for a pod we have not heard from). Admission sheds sheddable work only when
*every* candidate is saturated (``all_saturated``); upstream instead averages a per-endpoint
utilisation and sheds at >= 1.0, which can shed while one endpoint is idle.

As a Filter (only when a profile references it) it keeps endpoints with fresh metrics and
``queue < queueDepthThreshold * (1 + headroom)`` and ``kv < kvCacheUtilThreshold * (1 + headroom)``;
when none qualifies it returns every candidate (fail open: routing somewhere beats a 503).
Age is ``clock.now() - MetricsSnapshot.updated_at`` on the injected clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.clock import Clock
from epp.framework.endpoint import EndpointState
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.saturation import Thresholds
from epp.framework.scheduling import CycleState
from epp.plugins._params import Params

__all__ = ["TYPE", "UtilizationDetector", "create"]

TYPE = "utilization-detector"


class UtilizationDetector(NamedPlugin):
    """SaturationDetector + Filter over queue depth, KV-cache use and metric age."""

    plugin_type = TYPE

    __slots__ = ("_clock", "_kv", "_kv_limit", "_queue", "_queue_limit", "_stale", "thresholds")

    def __init__(self, name: str = TYPE, *, thresholds: Thresholds | None = None, clock: Clock) -> None:
        super().__init__(name)
        self.thresholds = t = thresholds if thresholds is not None else Thresholds()
        self._clock = clock
        self._queue = t.queue_depth
        self._kv = t.kv_cache_util
        self._stale = t.staleness_seconds
        self._queue_limit = t.queue_depth * (1.0 + t.headroom)
        self._kv_limit = t.kv_cache_util * (1.0 + t.headroom)

    def is_saturated(self, state: EndpointState, now: float) -> bool:
        m = state.metrics
        return m.age(now) > self._stale or m.waiting_queue >= self._queue or m.kv_cache_usage >= self._kv

    def utilization(self, state: EndpointState, now: float) -> float:
        m = state.metrics
        if m.age(now) > self._stale:
            return 1.0
        return max(m.waiting_queue / self._queue, m.kv_cache_usage / self._kv)

    def all_saturated(self, candidates: Sequence[EndpointState], now: float) -> bool:
        is_saturated = self.is_saturated
        return all(is_saturated(c, now) for c in candidates)

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        now = self._clock.now()
        stale, q_limit, kv_limit = self._stale, self._queue_limit, self._kv_limit
        kept = [
            c
            for c in candidates
            if c.metrics.age(now) <= stale and c.metrics.waiting_queue < q_limit and c.metrics.kv_cache_usage < kv_limit
        ]
        return kept if kept else list(candidates)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> UtilizationDetector:
    defaults = Thresholds()
    params = Params(TYPE, parameters)
    queue = params.integer("queueDepthThreshold", defaults.queue_depth, minimum=1)
    kv = params.number("kvCacheUtilThreshold", defaults.kv_cache_util, minimum=0.0, maximum=1.0, exclusive_minimum=True)
    stale = params.duration("metricsStalenessThreshold", defaults.staleness_seconds)
    headroom = params.number("headroom", defaults.headroom, minimum=0.0)
    params.done()
    try:
        thresholds = Thresholds(queue_depth=queue, kv_cache_util=kv, staleness_seconds=stale, headroom=headroom)
    except ValueError as exc:  # Thresholds re-checks; the getters above should already have caught it
        raise PluginConfigError(f"{TYPE}.parameters: {exc}") from exc
    return UtilizationDetector(name, thresholds=thresholds, clock=context.clock)
