"""The ``inference_pool_*`` gauges: pool-wide averages of the scraped model-server metrics.

Upstream refreshes them every 5 s (``refreshPrometheusMetricsInterval``); :meth:`PoolGauges.refresh`
also runs on demand, e.g. just before ``/metrics`` is served, so a scrape never sees values older
than the model-server metrics they summarise. ``ready_pods`` counts endpoints whose metrics are
fresh by ``--metrics-staleness-threshold`` (2 s, ``framework/staleness.py``), and the averages are
over those endpoints, as upstream's; with none fresh they are 0 (upstream leaves them at their
last value: a dashboard here never shows a pool's load from metrics nobody vouches for).
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
:class:`PoolSeries` declares them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import Protocol

from epp.clock import Clock
from epp.datastore.types import PoolSpec
from epp.framework.endpoint import EndpointState
from epp.framework.staleness import FLAG_DEFAULT, Staleness
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.families import Names
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Gauge

__all__ = ["PoolGauges", "PoolSeries"]

_log = logging.getLogger(__name__)

_ENDPOINT = ("endpoint_name", "namespace")


def _pool(gie: str, llm_d: str, gie_help: str, llm_d_help: str = "") -> Names:
    return Names(gie, llm_d, gie_help, llm_d_help, labels=("name",))


class PoolSeries:
    """Upstream's pool gauges (label ``name``: the pool), per-endpoint queue and in-flight gauges; ours
    for how fresh each endpoint's metrics are."""

    def __init__(self, metrics: EppMetrics) -> None:
        f = metrics.families
        self.avg_kv = f.gauge(
            _pool(
                "inference_pool_average_kv_cache_utilization",
                "llm_d_epp_average_kv_cache_utilization",
                "The average kv cache utilization for an inference server pool.",
            )
        )
        self.avg_queue = f.gauge(
            _pool(
                "inference_pool_average_queue_size",
                "llm_d_epp_average_queue_size",
                "The average number of requests pending in the model server queue.",
            )
        )
        self.avg_running = f.gauge(
            _pool(
                "inference_pool_average_running_requests",
                "llm_d_epp_average_running_requests",
                "The average number of running requests across all pods in the inference pool.",
                "The average number of running requests across model servers in the pool.",
            )
        )
        self.ready_pods = f.gauge(
            _pool(
                "inference_pool_ready_pods",
                "llm_d_epp_ready_endpoints",
                "The number of ready pods in the inference server pool.",
                "The number of ready endpoints in the inference server pool.",
            )
        )
        self.inflight_requests = f.gauge(  # values: endpoint name, namespace
            Names(
                None,
                "llm_d_epp_inflight_requests",
                "Current number of in-flight requests per endpoint, as tracked by the picker "
                "(routed, response not yet ended).",
                labels=_ENDPOINT,
            )
        )
        self.inflight_tokens = f.gauge(  # values: endpoint name, namespace
            Names(
                None,
                "llm_d_epp_inflight_tokens",
                "Current number of in-flight tokens per endpoint (estimated prompt tokens, optionally plus "
                "estimated output), as tracked by the picker.",
                labels=_ENDPOINT,
            )
        )
        self.per_pod_queue = f.gauge(
            Names(
                "inference_pool_per_pod_queue_size",
                "llm_d_epp_per_endpoint_queue_size",
                "The total number of requests pending in the model server queue for each underlying pod.",
                "The total number of requests pending in the model server queue for each underlying endpoint.",
                labels=("name", "model_server_endpoint"),
                gie_labels=("name", "model_server_pod"),
                renamed={"model_server_pod": "model_server_endpoint"},
            )
        )
        self.scrape_interval = Gauge(
            "epp_endpoint_scrape_interval_seconds",
            "Per endpoint: seconds between its last two successful scrapes (absent until two).",
            ("name", "model_server_endpoint"),
            registry=metrics.registry,
        )
        self.metrics_age = Gauge(
            "epp_endpoint_metrics_age_seconds",
            "Per endpoint: seconds since its last successful scrape (absent until one).",
            ("name", "model_server_endpoint"),
            registry=metrics.registry,
        )


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
        staleness: Staleness = FLAG_DEFAULT,
    ) -> None:
        if interval <= 0:
            raise ValueError(f"interval ({interval}) must be > 0")
        self._datastore = datastore
        self._metrics = metrics.series(PoolSeries)
        self._clock = clock
        self._interval = interval
        self._staleness = staleness
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
        is_stale, now = self._staleness.is_stale, self._clock.now()
        kv = queue = running = 0.0
        ready = 0
        seen: set[str] = set()
        seen_in_flight: set[tuple[str, str]] = set()
        for state in endpoints:
            metrics = state.metrics
            if not is_stale(metrics, now):
                ready += 1
                kv += metrics.kv_cache_usage
                queue += metrics.waiting_queue
                running += metrics.running
            pod = state.endpoint.name
            seen.add(pod)
            m.per_pod_queue.labels(name, pod).set(metrics.waiting_queue)
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
        m.avg_kv.labels(name).set(kv / ready if ready else 0.0)
        m.avg_queue.labels(name).set(queue / ready if ready else 0.0)
        m.avg_running.labels(name).set(running / ready if ready else 0.0)
        m.ready_pods.labels(name).set(ready)

    def _forget(self, name: str) -> None:
        m = self._metrics
        for gauge in (m.avg_kv, m.avg_queue, m.avg_running, m.ready_pods):
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
            m.metrics_age.remove(name, pod)
        else:
            m.metrics_age.labels(name, pod).set(max(age, 0.0))
        if interval:
            m.scrape_interval.labels(name, pod).set(interval)
        else:
            m.scrape_interval.remove(name, pod)

    def _forget_pod(self, name: str, pod: str) -> None:
        m = self._metrics
        for gauge in (m.per_pod_queue, m.metrics_age, m.scrape_interval):
            gauge.remove(name, pod)

    def _forget_in_flight(self, endpoints: set[tuple[str, str]]) -> None:
        for endpoint in endpoints:
            self._metrics.inflight_requests.remove(*endpoint)
            self._metrics.inflight_tokens.remove(*endpoint)

    async def start(self) -> None:
        """Refresh every ``interval`` of the injected clock until :meth:`stop`."""
        if self._task is None:
            self._task = start_guarded(self._run(), "epp-pool-gauges", forever=True)

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def _run(self) -> None:
        while True:
            try:
                self.refresh()
            except Exception:  # task boundary: a bad value must not stop the gauges for good
                _log.exception("Pool gauge refresh failed")
            await self._clock.sleep(self._interval)
