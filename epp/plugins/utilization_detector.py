"""utilization-detector: the saturation detector (admission) and a filter that sheds hot endpoints.

An endpoint's utilisation is ``max(queue / queueDepthThreshold, kv / kvCacheUtilThreshold)``, and
1.0 when its metrics are older than ``metricsStalenessThreshold`` (200 ms; we cannot vouch for a
pod we have not heard from); at >= 1.0 it is saturated. That threshold is this plugin's own, as
upstream's: ``--metrics-staleness-threshold`` does not change it (``framework/staleness.py``).
The pool's saturation, on which admission sheds sheddable work at >= 1.0, combines the
candidates' utilisations by ``aggregation``: ``average`` (the default, upstream's rule) or
``minimum`` (our option: shed only when every candidate is saturated, so one idle endpoint keeps
sheddable work flowing). No candidates count as 1.0.

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
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.saturation import Aggregation, Thresholds
from epp.framework.scheduling import CycleState
from epp.framework.staleness import Staleness

__all__ = ["TYPE", "UtilizationDetector", "create"]

TYPE = "utilization-detector"


class UtilizationDetector(NamedPlugin):
    """SaturationDetector + Filter over queue depth, KV-cache use and metric age."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.SATURATION_DETECTOR, PluginKind.FILTER})

    __slots__ = ("_clock", "_kv", "_kv_limit", "_queue", "_queue_limit", "_staleness", "aggregation", "thresholds")

    def __init__(
        self,
        name: str = TYPE,
        *,
        thresholds: Thresholds | None = None,
        aggregation: Aggregation = Aggregation.AVERAGE,
        clock: Clock,
    ) -> None:
        super().__init__(name)
        self.thresholds = t = thresholds if thresholds is not None else Thresholds()
        self.aggregation = aggregation
        self._clock = clock
        self._queue = t.queue_depth
        self._kv = t.kv_cache_util
        self._staleness = Staleness(t.staleness_seconds)
        self._queue_limit = t.queue_depth * (1.0 + t.headroom)
        self._kv_limit = t.kv_cache_util * (1.0 + t.headroom)

    def utilization(self, state: EndpointState, now: float) -> float:
        """``max(queue/queueDepthThreshold, kv/kvCacheUtilThreshold)``; 1.0 for stale metrics (>= 1.0: saturated)."""
        m = state.metrics
        if self._staleness.is_stale(m, now):
            return 1.0
        return max(m.waiting_queue / self._queue, m.kv_cache_usage / self._kv)

    def saturation(self, candidates: Sequence[EndpointState], now: float) -> float:
        if not candidates:
            return 1.0
        utilization = self.utilization
        scores = [utilization(c, now) for c in candidates]
        if self.aggregation is Aggregation.MINIMUM:
            return min(scores)
        return sum(scores) / len(scores)

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        fresh_since = self._staleness.fresh_since(self._clock.now())
        q_limit, kv_limit = self._queue_limit, self._kv_limit
        kept = [
            c
            for c in candidates
            if c.metrics.updated_at >= fresh_since
            and c.metrics.waiting_queue < q_limit
            and c.metrics.kv_cache_usage < kv_limit
        ]
        return kept if kept else list(candidates)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> UtilizationDetector:
    defaults = Thresholds()
    params = Params(TYPE, parameters)
    queue = params.integer("queueDepthThreshold", defaults.queue_depth, minimum=1)
    kv = params.number("kvCacheUtilThreshold", defaults.kv_cache_util, minimum=0.0, maximum=1.0, exclusive_minimum=True)
    stale = params.duration("metricsStalenessThreshold", defaults.staleness_seconds)
    headroom = params.number("headroom", defaults.headroom, minimum=0.0)
    aggregation = params.choice("aggregation", Aggregation.AVERAGE.value, [a.value for a in Aggregation])
    params.done()
    try:
        thresholds = Thresholds(queue_depth=queue, kv_cache_util=kv, staleness_seconds=stale, headroom=headroom)
    except ValueError as exc:  # Thresholds re-checks; the getters above should already have caught it
        raise PluginConfigError(f"{TYPE}.parameters: {exc}") from exc
    return UtilizationDetector(name, thresholds=thresholds, aggregation=Aggregation(aggregation), clock=context.clock)
