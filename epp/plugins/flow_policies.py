"""Flow-control policies with upstream's type names: ordering in a flow, fairness between flows, band ceilings.

- ``fcfs-ordering-policy`` (default): earliest arrival first.
- ``edf-ordering-policy``: earliest ``enqueue time + TTL`` first; a request without a TTL sorts
  after every request with one; ties go to the earlier arrival.
- ``global-strict-fairness-policy`` (default): the best head over every flow of the band, as if
  the band were one queue.
- ``round-robin-fairness-policy``: flows in fairness-id order, the next non-empty one after the
  flow served last (upstream also sorts by priority first; all flows of a band share one).
- ``static-usage-limit-policy`` (default): every band gets ``threshold`` (default 1.0) as its
  saturation ceiling.

None of them has parameters but the last, and none holds queue state.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.flowcontrol import FlowView, QueuedRequest
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind

__all__ = [
    "EDF_TYPE",
    "FCFS_TYPE",
    "GLOBAL_STRICT_TYPE",
    "ROUND_ROBIN_TYPE",
    "STATIC_USAGE_LIMIT_TYPE",
    "EdfOrdering",
    "FcfsOrdering",
    "GlobalStrictFairness",
    "RoundRobinFairness",
    "StaticUsageLimit",
    "create_edf",
    "create_fcfs",
    "create_global_strict",
    "create_round_robin",
    "create_static_usage_limit",
]

FCFS_TYPE = "fcfs-ordering-policy"
EDF_TYPE = "edf-ordering-policy"
GLOBAL_STRICT_TYPE = "global-strict-fairness-policy"
ROUND_ROBIN_TYPE = "round-robin-fairness-policy"
STATIC_USAGE_LIMIT_TYPE = "static-usage-limit-policy"


class FcfsOrdering(NamedPlugin):
    """Earliest arrival first."""

    plugin_type = FCFS_TYPE
    kinds = frozenset({PluginKind.ORDERING_POLICY})
    __slots__ = ()

    def key(self, item: QueuedRequest) -> tuple[float, ...]:
        return (item.seq,)


class EdfOrdering(NamedPlugin):
    """Earliest deadline (enqueue + TTL) first; no TTL sorts last; ties by arrival."""

    plugin_type = EDF_TYPE
    kinds = frozenset({PluginKind.ORDERING_POLICY})
    __slots__ = ()

    def key(self, item: QueuedRequest) -> tuple[float, ...]:
        if item.ttl > 0:
            return (0, item.enqueued_at + item.ttl, item.seq)
        return (1, 0.0, item.seq)


class GlobalStrictFairness(NamedPlugin):
    """The flow whose head comes first by the band's ordering: no fairness between flows."""

    plugin_type = GLOBAL_STRICT_TYPE
    kinds = frozenset({PluginKind.FAIRNESS_POLICY})
    __slots__ = ()

    def pick(self, flows: Sequence[FlowView], last: str | None) -> FlowView | None:
        return min(flows, key=lambda flow: flow.head_key(), default=None)


class RoundRobinFairness(NamedPlugin):
    """Each non-empty flow in turn, in fairness-id order."""

    plugin_type = ROUND_ROBIN_TYPE
    kinds = frozenset({PluginKind.FAIRNESS_POLICY})
    __slots__ = ()

    def pick(self, flows: Sequence[FlowView], last: str | None) -> FlowView | None:
        if not flows:
            return None
        if last is not None:
            for flow in flows:
                if flow.fairness_id > last:
                    return flow
        return flows[0]


class StaticUsageLimit(NamedPlugin):
    """Every band dispatches while the pool's saturation is below ``threshold``."""

    plugin_type = STATIC_USAGE_LIMIT_TYPE
    kinds = frozenset({PluginKind.USAGE_LIMIT_POLICY})
    __slots__ = ("threshold",)

    def __init__(self, name: str = STATIC_USAGE_LIMIT_TYPE, *, threshold: float = 1.0) -> None:
        super().__init__(name)
        self.threshold = threshold

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        return [self.threshold] * len(priorities)


def _no_parameters(type_name: str, parameters: Mapping[str, Any]) -> None:
    Params(type_name, parameters).done()


def create_fcfs(name: str, parameters: Mapping[str, Any], context: PluginContext) -> FcfsOrdering:
    _no_parameters(FCFS_TYPE, parameters)
    return FcfsOrdering(name)


def create_edf(name: str, parameters: Mapping[str, Any], context: PluginContext) -> EdfOrdering:
    _no_parameters(EDF_TYPE, parameters)
    return EdfOrdering(name)


def create_global_strict(name: str, parameters: Mapping[str, Any], context: PluginContext) -> GlobalStrictFairness:
    _no_parameters(GLOBAL_STRICT_TYPE, parameters)
    return GlobalStrictFairness(name)


def create_round_robin(name: str, parameters: Mapping[str, Any], context: PluginContext) -> RoundRobinFairness:
    _no_parameters(ROUND_ROBIN_TYPE, parameters)
    return RoundRobinFairness(name)


def create_static_usage_limit(name: str, parameters: Mapping[str, Any], context: PluginContext) -> StaticUsageLimit:
    params = Params(STATIC_USAGE_LIMIT_TYPE, parameters)
    threshold = params.number("threshold", 1.0, minimum=0.0, exclusive_minimum=True)
    params.done()
    return StaticUsageLimit(name, threshold=threshold)
