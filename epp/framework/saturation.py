"""Saturation: one definition shared by admission, the utilization filter and the autoscaler.

An endpoint is saturated when its waiting queue or KV-cache use reaches a threshold, or when its
metrics are older than the staleness threshold (we cannot vouch for a pod we have not heard from).
A detector turns the candidates of one request into a pool saturation; admission sheds sheddable
work at >= 1.0 (upstream's ``SaturationDetector.Saturation``). How the per-endpoint scores are
combined is the detector's :class:`Aggregation`.

A filter that drops sheddable work by its own rule (the v0.3 tree) is a :class:`SelfAdmitting`
plugin: a configuration whose every profile runs one has no separate admission step, as v0.3 had
none, unless it names a saturation detector.

A pool with disaggregated serving is as saturated as its busiest stage (llm-d router flow
control's ``partitionEndpoints``): :func:`stage_saturation` asks the detector about the prefill
pods and the decode pods separately (a ``prefill-decode`` pod counts in both, encode-only pods
and unknown roles in neither) and takes the larger; a pool where no pod serves either stage is
read whole. An unlabelled pool is all decode pods: its saturation is what the detector says of
the whole pool, as before.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName
from epp.framework.roles import Stage, saturation_stages

__all__ = ["Aggregation", "SaturationDetector", "SelfAdmitting", "StageSaturation", "Thresholds", "stage_saturation"]


class Aggregation(enum.Enum):
    """How per-endpoint utilisations become the pool's saturation (>= 1.0 sheds sheddable work)."""

    AVERAGE = "average"
    """Upstream's rule: the mean over the candidates, so hot endpoints can shed while one is idle."""
    MINIMUM = "minimum"
    """The least-loaded candidate's: shed only when every candidate is saturated."""


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
    """Decides whether a pool can take more sheddable work."""

    @property
    def typed_name(self) -> TypedName: ...

    def saturation(self, candidates: Sequence[EndpointState], now: float) -> float:
        """The pool's saturation over ``candidates``; 1.0 when there are none."""
        ...


@runtime_checkable
class SelfAdmitting(Protocol):
    """A Filter that sheds sheddable work itself (``legacy-filter-tree``'s hasCapacityForSheddable)."""

    sheds_sheddable_work: bool


@dataclass(frozen=True, slots=True)
class StageSaturation:
    """The pool's saturation and each stage's (None: no pod serves that stage)."""

    effective: float
    prefill: float | None = None
    decode: float | None = None


def stage_saturation(
    read: Callable[[Sequence[EndpointState]], float], endpoints: Sequence[EndpointState]
) -> StageSaturation:
    """The larger of the prefill pods' and the decode pods' saturation (see the module docstring).

    ``read`` is the detector's saturation of a set of endpoints, as the caller reads it (the
    pipeline and the queue contain a failing detector their own way).
    """
    prefill: list[EndpointState] = []
    decode: list[EndpointState] = []
    for state in endpoints:
        stages = saturation_stages(state.endpoint.labels)
        if Stage.DECODE in stages:
            decode.append(state)
        if Stage.PREFILL in stages:
            prefill.append(state)
    if not prefill and not decode:
        return StageSaturation(read(endpoints))
    if not prefill:
        whole = read(decode)
        return StageSaturation(whole, decode=whole)
    p = read(prefill)
    d = read(decode) if decode else None
    return StageSaturation(p if d is None else max(p, d), prefill=p, decode=d)
