"""The flow controller: holds admitted requests until the pool has room, then releases them by priority and fairness.

Upstream's model (``pkg/epp/flowcontrol``, one shard), on the event loop instead of goroutines.
:meth:`FlowController.enqueue` is called by the request pipeline with the request's priority and size;
it refuses at once when the queue is full (429, or 503 when the pool has no endpoint) and
otherwise returns an :class:`Item` whose future the stream awaits (:meth:`FlowController.wait`),
holding its ext_proc stream open without blocking anything else.

A **dispatch cycle** runs on every enqueue and, while anything is queued, every ``tick`` (1 ms,
as upstream's ticker; the loop sleeps on an event when the queue is empty). Each cycle:

1. expires items past their TTL. The budget is ``defaultRequestTTL`` while the pool has
   endpoints and ``noEndpointRequestTTL`` while it has none, counted from the later of the
   enqueue and the last change between the two (the llm-d router's rule); 0 never expires.
   Both budgets start for every item at the same moment or at its enqueue, so the oldest item
   always expires first, and only the front of the arrival list is looked at;
2. reads the saturation of the *whole* pool from the current config's saturation detector
   (an empty pool reads 1.0, so nothing dispatches: the waiting room for scale-from-zero); with
   disaggregated serving, the busier of the prefill and decode stages
   (:func:`~epp.framework.saturation.stage_saturation`, upstream's rule), each stage's value in
   ``flow_control_pool_saturation{stage}`` (a stage no pod serves has no series). A detector
   that fails is counted per plugin and read as 0 (1.0 while the pool is empty), and the
   policies are contained by ``Queues`` (``epp.scheduling.plugin_errors``);
3. releases at most one item (``Queues.next_item``: strict priority, head-of-line blocking at a
   band's ceiling, the band's fairness and ordering policies).

A client that goes away while queued cancels the awaiting task; the item leaves the queue at
once (``EvictedContextCancelled``) and frees its slot. :meth:`stop` evicts everything left
with 503 ``rejected-shutting-down``. The controller outlives configuration reloads (it belongs
to the pool, not to the config), so a reload keeps every queued request. Its series are
upstream's flow-control ones (:class:`FlowControlSeries`), declared whether or not the gate is on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from time import perf_counter

from epp.clock import Clock
from epp.config.flow_control import FlowControlSettings
from epp.flowcontrol.outcomes import Outcome
from epp.flowcontrol.queues import Item, Queues
from epp.framework.endpoint import EndpointState
from epp.framework.request import InferenceRequest
from epp.framework.saturation import SaturationDetector, stage_saturation
from epp.scheduling.plugin_errors import PluginErrors, read_saturation
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.children import CappedLabel
from epp.telemetry.families import GaugeChild, Names
from epp.telemetry.metrics import EppMetrics

__all__ = ["FlowControlSeries", "FlowController"]

log = logging.getLogger(__name__)

DEFAULT_TICK = 0.001
_MAX_FAIRNESS_LABELS = 1000
_OVERFLOW = "__overflow__"

_OBJECTIVE = ("model_name", "target_model_name")
_FLOW = ("fairness_id", "priority", "inference_pool", *_OBJECTIVE)
"""Queue labels; values always in this order."""
_QUEUE_DURATION_BUCKETS = (
    0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
_CYCLE_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1)


class FlowControlSeries:
    """Upstream's flow-control series: the queue (values in ``_FLOW`` order), its outcomes, the pool's saturation."""

    def __init__(self, metrics: EppMetrics) -> None:
        f = metrics.families
        self.queue_size = f.gauge(
            Names(
                "inference_extension_flow_control_queue_size",
                "llm_d_epp_flow_control_queue_size",
                "Current number of requests actively held in the Flow Control queue.",
                labels=_FLOW,
            )
        )
        self.queue_bytes = f.gauge(
            Names(
                "inference_extension_flow_control_queue_bytes",
                "llm_d_epp_flow_control_queue_bytes",
                "Current total size in bytes of requests actively held in the Flow Control queue.",
                labels=_FLOW,
            )
        )
        self.queue_duration = f.histogram(  # values: fairness id, priority, outcome, pool, model, target
            Names(
                "inference_extension_flow_control_request_queue_duration_seconds",
                "llm_d_epp_flow_control_request_queue_duration_seconds",
                "Distribution of total time requests spend in the Flow Control layer (from enqueue to final outcome).",
                labels=("fairness_id", "priority", "outcome", "inference_pool", *_OBJECTIVE),
            ),
            _QUEUE_DURATION_BUCKETS,
        )
        self.dispatch_cycle = f.histogram(
            Names(
                "inference_extension_flow_control_dispatch_cycle_duration_seconds",
                "llm_d_epp_flow_control_dispatch_cycle_duration_seconds",
                "Distribution of time taken for each internal dispatch cycle in the Flow Control layer.",
            ),
            _CYCLE_BUCKETS,
        )
        self.pool_saturation = f.gauge(  # values: pool, stage (this picker gates on "effective" only)
            Names(
                "inference_extension_flow_control_pool_saturation",
                "llm_d_epp_flow_control_pool_saturation",
                "Current saturation level of the inference pool (0.0 = empty, 1.0 = fully saturated).",
                "Pool saturation signal gating Flow Control dispatch. 1.0 is the gating set point; values above "
                "1.0 indicate the magnitude of oversubscription past it. An empty pool reads as 1.0.",
                labels=("inference_pool", "stage"),
                gie_labels=("inference_pool",),
            )
        )
        self.requests = f.counter(  # values: outcome, priority, pool
            Names(
                None,
                "llm_d_epp_flow_control_requests_total",
                "Total number of requests processed by the Flow Control layer.",
                labels=("outcome", "priority", "inference_pool"),
            )
        )


class FlowController:
    """One pool's queue and its dispatch loop."""

    def __init__(
        self,
        settings: FlowControlSettings,
        *,
        pool_name: str,
        endpoints: Callable[[], Sequence[EndpointState]],
        detector: Callable[[], SaturationDetector],
        clock: Clock,
        metrics: EppMetrics,
        tick: float = DEFAULT_TICK,
    ) -> None:
        self.settings = settings
        self._pool = pool_name
        self._endpoints = endpoints
        self._detector = detector
        self._clock = clock
        self._metrics = metrics.series(FlowControlSeries)
        self._tick = tick
        self._errors = metrics.series(PluginErrors)
        self._queues = Queues(settings, self._errors.failed)
        self._arrivals: OrderedDict[int, Item] = OrderedDict()
        """Live items in enqueue order (the TTL sweep reads the front)."""
        self._seq = itertools.count()
        self._pool_empty = False
        self._regime_since = clock.now()
        self._busy = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._running = False
        self._fairness_labels = CappedLabel(_MAX_FAIRNESS_LABELS, _OVERFLOW)
        self._failing = False
        self._saturation = self._metrics.pool_saturation.labels(pool_name, "effective")
        self._stages: dict[str, GaugeChild | None] = {"prefill": None, "decode": None}
        self._cycle_duration = self._metrics.dispatch_cycle.labels()

    @property
    def queued(self) -> int:
        """Requests waiting now."""
        return self._queues.count

    @property
    def queued_bytes(self) -> int:
        return self._queues.bytes

    async def start(self) -> None:
        self._running = True
        self._task = start_guarded(self._run(), f"flow-control-{self._pool}", forever=True)

    async def stop(self) -> None:
        """Stop dispatching; every queued request ends with 503 ``rejected-shutting-down``."""
        self._running = False
        await cancel_and_wait(self._task)
        self._task = None
        for item in list(self._arrivals.values()):
            self._finish(item, Outcome.EVICTED_OTHER)

    # -- the request side ------------------------------------------------------------------------

    def enqueue(self, request: InferenceRequest) -> Item:
        """Queue ``request`` (its priority and size set) and run a cycle; raises EppError when refused."""
        if not self._running:
            raise Outcome.EVICTED_OTHER.error()
        now = self._clock.now()
        fairness_id = request.flow()
        priority = request.priority
        labels = (
            self._fairness_labels.value(fairness_id),
            str(priority),
            self._pool,
            request.model,
            request.target_model or request.model,
        )
        if not self._queues.has_room(priority, request.size):
            outcome = Outcome.REJECTED_NO_ENDPOINTS if not self._endpoints() else Outcome.REJECTED_CAPACITY
            self._record(labels, outcome, 0.0)
            raise outcome.error()
        item = Item(
            request,
            fairness_id=fairness_id,
            enqueued_at=now,
            ttl=self.settings.ttl,
            seq=next(self._seq),
            future=asyncio.get_running_loop().create_future(),
            labels=labels,
        )
        self._queues.add(item)
        self._arrivals[item.seq] = item
        self._metrics.queue_size.labels(*labels).inc()
        self._metrics.queue_bytes.labels(*labels).inc(item.size)
        self.cycle()
        if self._queues.count:
            self._busy.set()
        return item

    async def wait(self, item: Item) -> None:
        """Until ``item`` is dispatched; raises its outcome's EppError. Cancelling leaves the queue at once."""
        try:
            await item.future
        except asyncio.CancelledError:
            if item.live:
                self._finish(item, Outcome.EVICTED_CONTEXT_CANCELLED)
            raise

    # -- the dispatch side -----------------------------------------------------------------------

    def cycle(self) -> None:
        """One dispatch cycle: expire, read saturation, release at most one item."""
        start = perf_counter()
        now = self._clock.now()
        endpoints = self._endpoints()
        empty = not endpoints
        if empty != self._pool_empty:
            self._pool_empty = empty
            self._regime_since = now
        self._expire(now)
        if self._queues.count:
            detector, failed, fallback = self._detector(), self._errors.failed, 1.0 if empty else 0.0
            saturation = stage_saturation(
                lambda some: read_saturation(detector, some, now, failed, fallback=fallback), endpoints
            )
            self._saturation.set(saturation.effective)
            self._record_stage("prefill", saturation.prefill)
            self._record_stage("decode", saturation.decode)
            item = self._queues.next_item(saturation.effective)
            if item is not None:
                self._finish(item, Outcome.DISPATCHED)
        self._cycle_duration.observe(perf_counter() - start)

    def _record_stage(self, stage: str, value: float | None) -> None:
        """One stage's gauge (llm-d's series only: GIE's has no stage); its series goes when no pod serves it."""
        child = self._stages[stage]
        if value is not None:
            if child is None:
                child = self._stages[stage] = self._metrics.pool_saturation.exact(self._pool, stage)
            child.set(value)
        elif child is not None:
            self._metrics.pool_saturation.remove_exact(self._pool, stage)
            self._stages[stage] = None

    def _expire(self, now: float) -> None:
        settings = self.settings
        budget = settings.no_endpoint_ttl if self._pool_empty else settings.ttl
        if not budget:
            return
        arrivals = self._arrivals
        since = self._regime_since
        outcome = Outcome.EVICTED_NO_ENDPOINTS if self._pool_empty else Outcome.EVICTED_TTL
        while arrivals:
            item = next(iter(arrivals.values()))
            if max(item.enqueued_at, since) + budget > now:
                return
            self._finish(item, outcome)

    def _finish(self, item: Item, outcome: Outcome) -> None:
        """``item`` leaves the queue with ``outcome``: counts, gauges, metrics, and its waiter told."""
        self._queues.remove(item)
        del self._arrivals[item.seq]
        metrics, labels = self._metrics, item.labels
        metrics.queue_size.labels(*labels).dec()
        metrics.queue_bytes.labels(*labels).dec(item.size)
        self._record(labels, outcome, self._clock.now() - item.enqueued_at)
        future = item.future
        if not future.done():
            if outcome is Outcome.DISPATCHED:
                item.request.queue_wait = self._clock.now() - item.enqueued_at
                future.set_result(None)
            else:
                future.set_exception(outcome.error())

    def _record(self, labels: tuple[str, ...], outcome: Outcome, waited: float) -> None:
        fairness, priority, pool, model, target = labels
        self._metrics.queue_duration.labels(fairness, priority, outcome.label, pool, model, target).observe(waited)
        self._metrics.requests.labels(outcome.label, priority, pool).inc()

    async def _run(self) -> None:
        """Cycles every ``tick`` while something is queued; parked while the queue is empty."""
        clock, busy = self._clock, self._busy
        while True:
            if not self._queues.count:
                busy.clear()
                await busy.wait()
            await clock.sleep(self._tick)
            try:
                self.cycle()
            except Exception:  # a bug must not stop dispatching for good (plugins are contained before this)
                if not self._failing:  # once per streak, not a thousand lines a second
                    log.exception("flow-control dispatch cycle failed")
                self._failing = True
            else:
                self._failing = False
