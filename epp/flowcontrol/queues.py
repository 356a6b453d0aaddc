"""The queue's structure: priority bands of flows of items, with the capacity each may hold.

Pure bookkeeping, no time and no I/O (the controller drives it): a :class:`Band` per priority
(created on first use from the settings' template), inside it a :class:`Flow` per fairness id,
each a heap ordered by the band's ordering policy. Counts and bytes are kept per band and in
total, for the capacity check at enqueue (``maxRequests``/``maxBytes``, 0 = no limit) and the
gauges. An item that leaves early (cancelled, expired) is marked dead and its slot freed at once;
its heap entry is dropped when it reaches the head. An empty flow is forgotten.

The policies are plugins, perhaps installed ones, and are contained like every plugin
(docs/plugins.md, "When a plugin fails"): a failure is told to ``failed`` (counted in
``epp_plugin_errors_total`` and logged) and the queue goes on by a fixed rule. An ordering policy
that raises or answers no tuple of numbers orders that item first come, first served (its arrival
number as the key); a fairness policy that raises or answers no flow of those given is replaced by
round-robin (the next fairness id after the last dispatched); a usage-limit policy that raises or
answers no number per band gives every band the ceiling 1.0 (dispatch while not saturated).
"""

from __future__ import annotations

import asyncio
import heapq
from collections.abc import Mapping, Sequence

from epp.config.flow_control import BandSettings, FlowControlSettings
from epp.framework.request import InferenceRequest
from epp.scheduling.plugin_errors import EXCEPTION, MALFORMED, PluginFailed, Reason

__all__ = ["Band", "Flow", "Item", "Queues"]


class Item:
    """One queued request; ``future`` resolves when it is dispatched (or fails with its outcome)."""

    __slots__ = ("enqueued_at", "fairness_id", "future", "labels", "live", "priority", "request", "seq", "size", "ttl")

    def __init__(
        self,
        request: InferenceRequest,
        *,
        fairness_id: str,
        enqueued_at: float,
        ttl: float,
        seq: int,
        future: asyncio.Future[None],
        labels: tuple[str, ...],
    ) -> None:
        self.request = request
        self.fairness_id = fairness_id
        self.priority = request.priority
        self.size = request.size
        self.enqueued_at = enqueued_at
        self.ttl = ttl
        self.seq = seq
        self.future = future
        self.labels = labels
        """Its metric labels: fairness id, priority, pool, model, target model."""
        self.live = True

    @property
    def headers(self) -> Mapping[str, str]:
        return self.request.headers


class Flow:
    """The items of one fairness id in one band, in the band's order."""

    __slots__ = ("_heap", "count", "fairness_id")

    def __init__(self, fairness_id: str) -> None:
        self.fairness_id = fairness_id
        self._heap: list[tuple[tuple[float, ...], int, Item]] = []
        self.count = 0

    def push(self, key: tuple[float, ...], item: Item) -> None:
        heapq.heappush(self._heap, (key, item.seq, item))
        self.count += 1

    def _drop_dead(self) -> None:
        heap = self._heap
        while heap and not heap[0][2].live:
            heapq.heappop(heap)

    def head_key(self) -> tuple[float, ...]:
        self._drop_dead()
        return self._heap[0][0]

    def head(self) -> Item:
        self._drop_dead()
        return self._heap[0][2]

    def pop(self) -> Item:
        """Remove and return the head (the flow is not empty)."""
        self._drop_dead()
        return heapq.heappop(self._heap)[2]


class Band:
    """One priority's flows and totals."""

    __slots__ = ("bytes", "count", "flows", "last", "settings")

    def __init__(self, settings: BandSettings) -> None:
        self.settings = settings
        self.flows: dict[str, Flow] = {}
        self.count = 0
        self.bytes = 0
        self.last: str | None = None
        """The fairness id dispatched from last (round-robin's cursor)."""

    @property
    def priority(self) -> int:
        return self.settings.priority

    def nonempty_flows(self) -> list[Flow]:
        """Flows with items, by fairness id."""
        return sorted((f for f in self.flows.values() if f.count), key=lambda f: f.fairness_id)


class Queues:
    """Every band, highest priority first, with the global totals."""

    __slots__ = ("_failed", "_settings", "bands", "bytes", "count", "order")

    def __init__(self, settings: FlowControlSettings, failed: PluginFailed) -> None:
        self._settings = settings
        self._failed = failed
        self.bands: dict[int, Band] = {}
        self.order: list[Band] = []
        """Bands by priority, highest first."""
        self.count = 0
        self.bytes = 0
        for priority in settings.bands:
            self.band(priority)

    def band(self, priority: int) -> Band:
        """The band of ``priority``, made on first use."""
        band = self.bands.get(priority)
        if band is None:
            band = self.bands[priority] = Band(self._settings.band_for(priority))
            self.order.append(band)
            self.order.sort(key=lambda b: -b.priority)
        return band

    def has_room(self, priority: int, size: int) -> bool:
        """Whether one more item of ``size`` bytes fits, globally and in its band (0 = no limit)."""
        s = self._settings
        if (s.max_requests and self.count + 1 > s.max_requests) or (s.max_bytes and self.bytes + size > s.max_bytes):
            return False
        band = self.band(priority)
        b = band.settings
        return not (
            (b.max_requests and band.count + 1 > b.max_requests) or (b.max_bytes and band.bytes + size > b.max_bytes)
        )

    def add(self, item: Item) -> None:
        band = self.band(item.priority)
        flow = band.flows.get(item.fairness_id)
        if flow is None:
            flow = band.flows[item.fairness_id] = Flow(item.fairness_id)
        flow.push(self._key(band, item), item)
        band.count += 1
        band.bytes += item.size
        self.count += 1
        self.bytes += item.size

    def remove(self, item: Item) -> None:
        """Take ``item`` out of the counts (it left: dispatched, expired, cancelled); idempotent."""
        if not item.live:
            return
        item.live = False
        band = self.bands[item.priority]
        flow = band.flows[item.fairness_id]
        flow.count -= 1
        if not flow.count:
            del band.flows[item.fairness_id]
        band.count -= 1
        band.bytes -= item.size
        self.count -= 1
        self.bytes -= item.size
        if not band.count:
            band.last = None

    def next_item(self, saturation: float) -> Item | None:
        """The item to dispatch at ``saturation``, or None (strict priority, head-of-line blocking).

        Bands are visited from the highest priority; the first non-empty band at or over its
        ceiling stops the search (nothing below it dispatches either); otherwise the band's
        fairness policy picks a flow and the flow's head is returned (still counted: the caller
        removes it). A band whose policy picks nothing is skipped.
        """
        order = self.order
        for band, ceiling in zip(order, self._ceilings(saturation), strict=True):
            if not band.count:
                continue
            if saturation >= ceiling:
                return None
            flow = self._pick(band)
            if flow is None:
                continue
            band.last = flow.fairness_id
            return flow.pop()
        return None

    # -- the policies, contained (see the module docstring) ---------------------------------------

    def _key(self, band: Band, item: Item) -> tuple[float, ...]:
        policy = band.settings.ordering
        try:
            key = policy.key(item)
            if isinstance(key, tuple) and all(isinstance(k, int | float) for k in key):
                return key
            self._failed("OrderingPolicy", policy.typed_name, MALFORMED, _malformed(key, "a tuple of numbers"), None)
        except Exception as exc:
            self._failed("OrderingPolicy", policy.typed_name, EXCEPTION, _raised(exc), exc)
        return (item.seq,)

    def _ceilings(self, saturation: float) -> Sequence[float]:
        policy, order = self._settings.usage_limit, self.order
        try:
            ceilings = policy.ceilings(saturation, [b.priority for b in order])
            if len(ceilings) == len(order) and all(isinstance(c, int | float) for c in ceilings):
                return ceilings
            detail = _malformed(ceilings, f"{len(order)} numbers (one per band)")
            self._failed("UsageLimitPolicy", policy.typed_name, MALFORMED, detail, None)
        except Exception as exc:
            self._failed("UsageLimitPolicy", policy.typed_name, EXCEPTION, _raised(exc), exc)
        return [1.0] * len(order)

    def _pick(self, band: Band) -> Flow | None:
        policy, flows, last = band.settings.fairness, band.nonempty_flows(), band.last
        reason: Reason = MALFORMED
        error: Exception | None = None
        try:
            flow = policy.pick(flows, last)
            if flow is None or (isinstance(flow, Flow) and flow in flows):
                return flow
            detail = _malformed(flow, "one of the flows it was given, or None")
        except Exception as exc:
            reason, error, detail = EXCEPTION, exc, _raised(exc)
        self._failed("FairnessPolicy", policy.typed_name, reason, detail, error)
        return next((f for f in flows if last is None or f.fairness_id > last), flows[0] if flows else None)


def _malformed(answer: object, expected: str) -> str:
    return f"returned {type(answer).__name__} {answer!r:.80}, not {expected}"


def _raised(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"
