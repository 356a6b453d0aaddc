"""The ``inference_pool_*`` gauges: pool-wide averages of the scraped model-server metrics.

Upstream refreshes them every 5 s (``refreshPrometheusMetricsInterval``); :meth:`PoolGauges.refresh`
also runs on demand, e.g. just before ``/metrics`` is served, so a scrape never sees values older
than the model-server metrics they summarise. ``ready_pods`` counts endpoints whose metrics are
fresher than ``--metrics-staleness-threshold`` (2 s); averages are over every endpoint, as upstream.
``per_pod_queue_size`` has one series per endpoint (``model_server_pod`` = ``<pod>-rank-<idx>``),
and so have the in-flight gauges ``llm_d_epp_inflight_requests`` / ``llm_d_epp_inflight_tokens``
(``endpoint_name``, ``namespace``; read here from the endpoints' counters, so counting a request
costs the request path no metric update);
series of endpoints or pools that went away are removed, not left frozen. Per endpoint, too, how
fresh its metrics are: ``epp_endpoint_metrics_age_seconds`` (since the last successful scrape) and
``epp_endpoint_scrape_interval_seconds`` (between its last two), computed here rather than on
every scrape, so hundreds of endpoints cost the scrape loop nothing. Each gauge is written
under the names ``--metrics-naming`` asks for: its ``llm_d_epp_*`` twin has the same value
(``llm_d_epp_ready_endpoints``, ``llm_d_epp_per_endpoint_queue_size`` with ``model_server_endpoint``).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from epp.clock import Clock
from epp.datastore.types import PoolSpec
from epp.framework.endpoint import EndpointState
from epp.telemetry.metrics import EppMetrics

__all__ = ["PoolGauges"]

_log = logging.getLogger(__name__)


class PoolSource(Protocol):
    """What the gauges read of the datastore."""

    @property
    def pool(self) -> PoolSpec | None: ...

    def endpoints(self) -> Sequence[EndpointState]: ...


class PoolGauges:
    """Computes and publishes the pool gauges periodically and on demand."""

    def __init__(
        self,
        datastore: PoolSource,
        metrics: EppMetrics,
        clock: Clock,
        *,
        interval: float = 5.0,
        staleness_threshold: float = 2.0,
    ) -> None:
        if interval <= 0 or staleness_threshold <= 0:
            raise ValueError(f"interval ({interval}) and staleness threshold ({staleness_threshold}) must be > 0")
        self._datastore = datastore
        self._metrics = metrics
        self._clock = clock
        self._interval = interval
        self._staleness = staleness_threshold
        self._pool_name: str | None = None
        self._pod_series: set[str] = set()
        self._in_flight_series: set[tuple[str, str]] = set()
        self._task: asyncio.Task[None] | None = None

    def refresh(self) -> None:
        """Recompute every gauge from the datastore now."""
        m = self._metrics
        pool = self._datastore.pool
        name = pool.name if pool is not None else None
        if self._pool_name is not None and name != self._pool_name:
            self._forget(self._pool_name)
        self._pool_name = name
        if name is None:
            return
        endpoints = self._datastore.endpoints()
        now = self._clock.now()
        count = len(endpoints)
        kv = queue = running = 0.0
        ready = 0
        seen: set[str] = set()
        seen_in_flight: set[tuple[str, str]] = set()
        for state in endpoints:
            metrics = state.metrics
            kv += metrics.kv_cache_usage
            queue += metrics.waiting_queue
            running += metrics.running
            if metrics.age(now) <= self._staleness:
                ready += 1
            pod = state.endpoint.name
            seen.add(pod)
            m.pool_per_pod_queue.labels(name, pod).set(metrics.waiting_queue)
            self._freshness(name, pod, metrics.age(now), metrics.scrape_interval)
            endpoint = (pod, state.endpoint.namespace)
            seen_in_flight.add(endpoint)
            m.inflight_requests.labels(*endpoint).set(state.in_flight_requests)
            m.inflight_tokens.labels(*endpoint).set(state.in_flight_tokens)
        for gone in self._pod_series - seen:
            self._forget_pod(name, gone)
        self._pod_series = seen
        self._forget_in_flight(self._in_flight_series - seen_in_flight)
        self._in_flight_series = seen_in_flight
        m.pool_avg_kv.labels(name).set(kv / count if count else 0.0)
        m.pool_avg_queue.labels(name).set(queue / count if count else 0.0)
        m.pool_avg_running.labels(name).set(running / count if count else 0.0)
        m.pool_ready_pods.labels(name).set(ready)

    def _forget(self, name: str) -> None:
        m = self._metrics
        for gauge in (m.pool_avg_kv, m.pool_avg_queue, m.pool_avg_running, m.pool_ready_pods):
            gauge.remove(name)
        for pod in self._pod_series:
            self._forget_pod(name, pod)
        self._pod_series = set()
        self._forget_in_flight(self._in_flight_series)
        self._in_flight_series = set()

    def _freshness(self, name: str, pod: str, age: float, interval: float) -> None:
        """The endpoint's metrics age and achieved scrape interval; each absent until it means something."""
        m = self._metrics
        if age == float("inf"):
            m.endpoint_metrics_age.remove(name, pod)
        else:
            m.endpoint_metrics_age.labels(name, pod).set(max(age, 0.0))
        if interval:
            m.endpoint_scrape_interval.labels(name, pod).set(interval)
        else:
            m.endpoint_scrape_interval.remove(name, pod)

    def _forget_pod(self, name: str, pod: str) -> None:
        m = self._metrics
        for gauge in (m.pool_per_pod_queue, m.endpoint_metrics_age, m.endpoint_scrape_interval):
            gauge.remove(name, pod)

    def _forget_in_flight(self, endpoints: set[tuple[str, str]]) -> None:
        for endpoint in endpoints:
            self._metrics.inflight_requests.remove(*endpoint)
            self._metrics.inflight_tokens.remove(*endpoint)

    async def start(self) -> None:
        """Refresh every ``interval`` of the injected clock until :meth:`stop`."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="epp-pool-gauges")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _run(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:  # task boundary: a bad value must not stop the gauges for good
                _log.exception("Pool gauge refresh failed")
            await self._clock.sleep(self._interval)
