"""legacy-filter-tree: the v0.3 scheduler's decision tree, reproduced exactly, as one Filter.

v0.3 (``pkg/epp/scheduling/scheduler.go`` and ``filter.go`` at v0.3.0) routed with a fixed tree:

    critical (request.priority > 0)?
     ├─ yes → lowQueueing (q < 128)?
     │         ├─ yes → loraSoftAffinity ─(either)→ leastQueuing ─(either)→ leastKVCache
     │         └─ no  → leastQueuing ─(either)→ loraSoftAffinity ─(either)→ leastKVCache
     └─ no  → hasCapacityForSheddable (q <= 5 and kv <= 0.8)?
               ├─ yes → leastQueuing ─(either)→ loraSoftAffinity ─(either)→ leastKVCache
               └─ no  → drop

A node succeeds when it leaves at least one endpoint: the next node then gets the filtered set;
on failure the next node gets the node's *input* (so a LoRA step that finds nothing passes its
input on). A failed leaf (or ``drop``) yields no endpoints, which fails the profile and so the
request gets 429, as v0.3 answered. Range filters keep ``[min, min + (max - min) / n]``, with
integer division for queues. v0.3 counted waiting adapters as active, and so does this filter.

v0.3 then picked uniformly at random among the survivors: pair this filter with
``random-picker`` and no scorers in a profile to get v0.3 routing (see docs/scheduling.md).

v0.3 had no admission step in front of the tree: sheddable (non-critical) work was dropped only
by the tree's own ``hasCapacityForSheddable`` branch (queue <= 5, so a pod at queue 5 still took
it). The filter says so (``sheds_sheddable_work``), and a configuration whose every profile runs
it gets no separate admission step unless it names a saturation detector; otherwise the
default utilization-detector would shed at queue 5 where v0.3 routed.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "LegacyFilterTree", "create"]

TYPE = "legacy-filter-tree"

_Step = Callable[[InferenceRequest, Sequence[EndpointState]], list[EndpointState]]


@dataclass(frozen=True, slots=True)
class _Node:
    """One filter of the tree and where to go next (v0.3's ``filter`` struct)."""

    step: _Step
    on_success: _Node | None = None
    on_failure: _Node | None = None
    on_either: _Node | None = None

    def run(self, request: InferenceRequest, pods: Sequence[EndpointState]) -> list[EndpointState]:
        filtered = self.step(request, pods)
        if filtered:
            nxt = self.on_success or self.on_either
            return nxt.run(request, filtered) if nxt is not None else filtered
        nxt = self.on_failure or self.on_either
        return nxt.run(request, pods) if nxt is not None else []


def _least_queuing(request: InferenceRequest, pods: Sequence[EndpointState]) -> list[EndpointState]:
    if not pods:
        return []
    queues = [p.metrics.waiting_queue for p in pods]
    low = min(queues)
    high = low + (max(queues) - low) // len(pods)  # Go int division
    return [p for p, q in zip(pods, queues, strict=True) if low <= q <= high]


def _least_kv_cache(request: InferenceRequest, pods: Sequence[EndpointState]) -> list[EndpointState]:
    if not pods:
        return []
    kvs = [p.metrics.kv_cache_usage for p in pods]
    low = min(kvs)
    high = low + (max(kvs) - low) / len(pods)
    return [p for p, kv in zip(pods, kvs, strict=True) if low <= kv <= high]


def _critical(request: InferenceRequest, pods: Sequence[EndpointState]) -> list[EndpointState]:
    return list(pods) if request.priority > 0 else []


def _drop(request: InferenceRequest, pods: Sequence[EndpointState]) -> list[EndpointState]:
    return []


class LegacyFilterTree(NamedPlugin):
    """The v0.3 tree as a Filter; its thresholds are parameters with the v0.3 defaults."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})
    sheds_sheddable_work = True  # framework.saturation.SelfAdmitting: no admission step in front of it

    __slots__ = ("_affinity", "_kv_threshold", "_lora_queue", "_queue_critical", "_rng", "_root")

    def __init__(
        self,
        name: str = TYPE,
        *,
        rng: random.Random,
        kv_cache_threshold: float = 0.8,
        queue_threshold_critical: int = 5,
        queueing_threshold_lora: int = 128,
        lora_affinity_threshold: float = 0.999,
    ) -> None:
        super().__init__(name)
        self._rng = rng
        self._kv_threshold = kv_cache_threshold
        self._queue_critical = queue_threshold_critical
        self._lora_queue = queueing_threshold_lora
        self._affinity = lora_affinity_threshold
        # One chain object shared by two branches, as in v0.3.
        queue_lora_kv = _Node(
            _least_queuing, on_either=_Node(self._lora_soft_affinity, on_either=_Node(_least_kv_cache))
        )
        low_latency = _Node(
            self._low_queueing,
            on_success=_Node(
                self._lora_soft_affinity, on_either=_Node(_least_queuing, on_either=_Node(_least_kv_cache))
            ),
            on_failure=queue_lora_kv,
        )
        sheddable = _Node(self._has_capacity_for_sheddable, on_success=queue_lora_kv, on_failure=_Node(_drop))
        self._root = _Node(_critical, on_success=low_latency, on_failure=sheddable)

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        return self._root.run(request, candidates)

    def _low_queueing(self, request: InferenceRequest, pods: Sequence[EndpointState]) -> list[EndpointState]:
        return [p for p in pods if p.metrics.waiting_queue < self._lora_queue]

    def _has_capacity_for_sheddable(
        self, request: InferenceRequest, pods: Sequence[EndpointState]
    ) -> list[EndpointState]:
        q, kv = self._queue_critical, self._kv_threshold
        return [p for p in pods if p.metrics.waiting_queue <= q and p.metrics.kv_cache_usage <= kv]

    def _lora_soft_affinity(self, request: InferenceRequest, pods: Sequence[EndpointState]) -> list[EndpointState]:
        model = request.target_model
        affinity: list[EndpointState] = []
        available: list[EndpointState] = []
        for p in pods:
            m = p.metrics
            loaded = m.active_adapters | m.waiting_adapters  # v0.3 merged waiting into active
            if model in loaded:
                affinity.append(p)
            elif len(loaded) < m.max_adapters:
                available.append(p)
        if affinity and available:
            return affinity if self._rng.random() < self._affinity else available
        return affinity or available


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> LegacyFilterTree:
    params = Params(TYPE, parameters)
    tree = LegacyFilterTree(
        name,
        rng=random.Random(context.seed),
        kv_cache_threshold=params.number("kvCacheThreshold", 0.8, minimum=0.0),
        queue_threshold_critical=params.integer("queueThresholdCritical", 5, minimum=0),
        queueing_threshold_lora=params.integer("queueingThresholdLoRA", 128, minimum=0),
        lora_affinity_threshold=params.number("loraAffinityThreshold", 0.999, minimum=0.0, maximum=1.0),
    )
    params.done()
    return tree
