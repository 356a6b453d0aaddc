"""utilization-filter: drop the candidates over any of the configured utilization caps.

The llm-d router's ``scheduling/filter/utilization``: each condition caps one metric
(``active-requests``: the picker's own in-flight request count for the endpoint, running and
queued alike; ``running-requests`` and ``waiting-queue``: what the model server reports;
``kv-cache-utilization``: its KV-cache use, a fraction); an endpoint is kept only when every
metric is at or under its ``maxValue``. A metric never scraped reads 0. With ``fallbackOnEmpty``, a
set the conditions empty is kept whole. ``inFlightLoadProducerName`` (``active-requests`` only)
names the ``inflight-load-producer`` whose counts are read; this picker keeps one in-flight count
per endpoint, so it is only checked to name one. Upstream registers it Alpha.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, InFlightEstimator

__all__ = ["METRICS", "TYPE", "UtilizationFilter", "create"]

TYPE = "utilization-filter"

_Read = Callable[[EndpointState], float]
METRICS: Mapping[str, _Read] = {
    "active-requests": lambda s: s.in_flight_requests,
    "running-requests": lambda s: s.metrics.running,
    "waiting-queue": lambda s: s.metrics.waiting_queue,
    "kv-cache-utilization": lambda s: s.metrics.kv_cache_usage,
}


class UtilizationFilter(NamedPlugin):
    """Candidates within every (metric, cap) condition."""

    __slots__ = ("conditions", "fallback_on_empty", "in_flight_producer")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})

    def __init__(
        self,
        name: str,
        conditions: Sequence[tuple[str, float]],
        *,
        fallback_on_empty: bool = False,
        in_flight_producer: str = "",
    ) -> None:
        super().__init__(name)
        self.conditions = tuple((METRICS[metric], cap) for metric, cap in conditions)
        self.fallback_on_empty = fallback_on_empty
        self.in_flight_producer = in_flight_producer

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        conditions = self.conditions
        kept = [c for c in candidates if all(read(c) <= cap for read, cap in conditions)]
        if not kept and self.fallback_on_empty:
            return list(candidates)
        return kept

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        name = self.in_flight_producer
        if not name:
            return
        plugin = lookup(f"{TYPE}.parameters.inFlightLoadProducerName", name)
        if not isinstance(plugin, InFlightEstimator):
            raise PluginConfigError(
                f"inFlightLoadProducerName: plugin {name!r} (type {plugin.typed_name.type!r}) is not an "
                "inflight-load-producer"
            )


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> UtilizationFilter:
    p = Params(TYPE, params)
    conditions: list[tuple[str, float]] = []
    for i, entry in enumerate(p.mappings("conditions")):
        metric = entry.choice("metric", "", tuple(METRICS))
        if not metric:
            raise PluginConfigError(f"{TYPE}.parameters.conditions[{i}].metric: required, one of {', '.join(METRICS)}")
        if not entry.present("maxValue"):
            raise PluginConfigError(f"{TYPE}.parameters.conditions[{i}].maxValue: required")
        cap = entry.number("maxValue", 0.0, minimum=0.0, maximum=1.0 if metric == "kv-cache-utilization" else None)
        entry.done()
        conditions.append((metric, cap))
    fallback = p.boolean("fallbackOnEmpty", False)
    producer = p.text("inFlightLoadProducerName") or ""
    p.done()
    if not conditions:
        raise PluginConfigError(f"{TYPE}.parameters.conditions: at least one condition is required")
    return UtilizationFilter(name, conditions, fallback_on_empty=fallback, in_flight_producer=producer)
