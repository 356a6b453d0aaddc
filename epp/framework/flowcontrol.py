"""Flow-control contracts: what a queued request looks like to the policies that order and pick it.

The flow controller (``epp.flowcontrol``) holds requests between admission and scheduling in
priority *bands*; inside a band each fairness id has its own *flow* (a queue). Three kinds of
plugin decide what leaves next, as upstream's (``pkg/epp/framework/interface/flowcontrol``):

- an :class:`OrderingPolicy` orders the items of one flow (FCFS, EDF): the item with the
  smallest :meth:`~OrderingPolicy.key` is the flow's head;
- a :class:`FairnessPolicy` picks which flow of a band dispatches next (global-strict,
  round-robin), from the band's non-empty flows;
- a :class:`UsageLimitPolicy` gives each band the saturation ceiling under which it may dispatch.

They are plugins so a config names them by upstream type; they hold no queue state (a band keeps
its round-robin cursor), so a config reload that builds new instances changes nothing queued.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, runtime_checkable

from epp.framework.plugin import TypedName

__all__ = ["FairnessPolicy", "FlowView", "OrderingPolicy", "QueuedRequest", "UsageLimitPolicy"]


class QueuedRequest(Protocol):
    """What ordering policies may read of a queued request."""

    @property
    def enqueued_at(self) -> float:
        """Clock seconds when the request entered the queue."""
        ...

    @property
    def ttl(self) -> float:
        """The request's effective TTL in seconds; 0 means none."""
        ...

    @property
    def seq(self) -> int:
        """Arrival order, unique: the final tie-break (FCFS)."""
        ...

    @property
    def headers(self) -> Mapping[str, str]:
        """The client's request headers (lower-case names)."""
        ...


class FlowView(Protocol):
    """One flow of a band as a fairness policy sees it."""

    @property
    def fairness_id(self) -> str: ...

    @property
    def count(self) -> int:
        """Items queued in the flow."""
        ...

    def head_key(self) -> tuple[float, ...]:
        """The ordering key of the item the flow would dispatch next (the flow is not empty)."""
        ...

    def head(self) -> QueuedRequest:
        """The item the flow would dispatch next (the flow is not empty)."""
        ...


@runtime_checkable
class OrderingPolicy(Protocol):
    """Orders the items of one flow; the smallest key dispatches first."""

    @property
    def typed_name(self) -> TypedName: ...

    def key(self, item: QueuedRequest) -> tuple[float, ...]:
        """The sort key of ``item`` (computed once, when it is queued)."""
        ...


@runtime_checkable
class FairnessPolicy(Protocol):
    """Chooses the flow of a band that dispatches next."""

    @property
    def typed_name(self) -> TypedName: ...

    def pick(self, flows: Sequence[FlowView], last: str | None) -> FlowView | None:
        """One of ``flows`` (every one non-empty, sorted by fairness id), or None.

        ``last`` is the fairness id this band dispatched from last time (None at first, and after
        the band emptied). Keys compare within a band only: a band has one ordering policy.
        """
        ...


@runtime_checkable
class UsageLimitPolicy(Protocol):
    """Each band's saturation ceiling: a band dispatches only while the pool's saturation is below it."""

    @property
    def typed_name(self) -> TypedName: ...

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        """One ceiling per band, ``priorities`` given from the highest down."""
        ...
