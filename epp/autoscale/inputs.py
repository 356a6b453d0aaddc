"""Per-replica load (KV-cache use, waiting queue) and idleness: scraped directly, or from Prometheus.

:class:`MetricsSource` is the seam. :class:`ScrapeSource` reads each Ready pod's ``/metrics`` with
the picker's parser and engine tables (``epp.datalayer``): no Prometheus needed.
:class:`PrometheusSource` runs upstream WVA's PromQL (``max_over_time[1m]`` per pod, filtered by
``namespace`` and ``model_name``) when ``--prometheus-url`` is given. Both return readings only for
the pods the controller asks about, so pods of deleted or foreign Deployments never count.

:class:`ScrapeSource` keeps each pod's health with the picker's state machine
(:mod:`epp.framework.health`): a refused or reset scrape makes it unreachable, a timeout or a
non-200 suspect, and a pod held out of service (one that keeps falling) gives no reading until
its back-off is over, as the picker routes nothing to it; each change logs one line.

Idleness (for scale-to-zero) needs positive evidence: Prometheus's request count over the window
is 0, or the scraper has watched the group for the whole window without seeing a running or
waiting request or a rise in ``vllm:request_success_total``. Unknown is ``None``, never "idle".
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp

from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import Clock
from epp.datalayer.engines import engine_spec, extract
from epp.datalayer.promtext import parse
from epp.framework.endpoint import join_host_port
from epp.framework.health import EndpointHealth, Health, HealthPolicy

__all__ = ["InputError", "MetricsSource", "PodTarget", "PrometheusSource", "ScrapeSource"]

log = logging.getLogger(__name__)

_REQUESTS_TOTAL = "vllm:request_success_total"


class InputError(Exception):
    """Load for a model group could not be read this cycle (the message says from where and why)."""


@dataclass(frozen=True, slots=True)
class PodTarget:
    """A Ready pod to read: its identity, where its ``/metrics`` is, and its engine type."""

    namespace: str
    name: str
    address: str
    port: int
    engine: str = "vllm"


class MetricsSource(Protocol):
    """Where the autoscaler's inputs come from."""

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> dict[str, ReplicaMetrics]:
        """Readings by pod name, for those of ``pods`` that reported; raises :class:`InputError`."""
        ...

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        """True only with evidence of no requests during the last ``window`` seconds."""
        ...


@dataclass(slots=True)
class _Activity:
    first_seen: float
    last_active: float
    reported: bool = False


class ScrapeSource:
    """Scrapes every Ready pod concurrently with a per-request deadline; failures skip the pod."""

    def __init__(self, session: aiohttp.ClientSession, clock: Clock, *, timeout: float = 2.0) -> None:
        self._session = session
        self._clock = clock
        self._timeout = timeout
        self._activity: dict[ModelKey, _Activity] = {}
        self._totals: dict[ModelKey, dict[str, float]] = {}  # request counter per pod, per group
        self._health: dict[ModelKey, dict[str, EndpointHealth]] = {}  # per pod asked about last, per group
        self._policy = HealthPolicy(on_transition=_log_transition)

    def health(self, key: ModelKey, pod: str) -> Health | None:
        """The pod's health as of the group's last collection (None: not asked about then)."""
        health = self._health.get(key, {}).get(pod)
        return None if health is None else health.state

    async def _scrape(
        self, pod: PodTarget, totals: dict[str, float], health: EndpointHealth
    ) -> tuple[ReplicaMetrics, bool] | None:
        url = f"http://{join_host_port(pod.address, pod.port)}/metrics"
        spec = engine_spec(pod.engine)
        try:
            async with asyncio.timeout(self._timeout), self._session.get(url) as resp:
                if resp.status != 200:
                    log.debug("scrape failed", extra={"url": url, "status": resp.status})
                    health.scrape_failed(f"scrape http: HTTP {resp.status}")
                    return None
                body = await resp.read()
        except (aiohttp.ClientConnectionError, ConnectionError, socket.gaierror) as e:
            log.debug("scrape failed", extra={"url": url, "error": repr(e)})
            health.unreachable(f"scrape connect: {e!r}", self._clock.now())
            return None
        except (aiohttp.ClientError, TimeoutError, OSError) as e:
            log.debug("scrape failed", extra={"url": url, "error": repr(e)})
            health.scrape_failed(f"scrape: {e!r}")
            return None
        health.scrape_ok(self._clock.now())
        if not health.routable(self._clock.now()):
            return None  # answering again, but held out for its back-off
        result = parse(body, spec.names | {_REQUESTS_TOTAL})
        extraction = extract(result, spec)
        if not extraction.updated:
            log.debug("scrape had no load metrics", extra={"url": url, "errors": extraction.errors})
            return None
        snap = extraction.snapshot
        active = snap.running > 0 or snap.waiting_queue > 0
        total = sum(s.value for s in result.samples.get(_REQUESTS_TOTAL, ()) if math.isfinite(s.value))
        if _REQUESTS_TOTAL in result.samples:
            previous = totals.get(pod.name)
            active = active or (previous is not None and total != previous)
            totals[pod.name] = total
        return ReplicaMetrics(pod.name, snap.kv_cache_usage, float(snap.waiting_queue)), active

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> dict[str, ReplicaMetrics]:
        previous = self._totals.get(key, {})
        totals = {p.name: previous[p.name] for p in pods if p.name in previous}  # pods gone: forgotten
        known = self._health.get(key, {})
        healths = {p.name: known.get(p.name) or EndpointHealth(f"{p.namespace}/{p.name}", self._policy) for p in pods}
        self._health[key] = healths  # pods gone: forgotten
        results = await asyncio.gather(*(self._scrape(p, totals, healths[p.name]) for p in pods))
        self._totals[key] = totals
        now = self._clock.now()
        activity = self._activity.setdefault(key, _Activity(first_seen=now, last_active=now))
        readings = {r.pod: r for r, _ in filter(None, results)}
        activity.reported = bool(readings)
        if any(active for _, active in filter(None, results)):
            activity.last_active = now
        return readings

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        a = self._activity.get(key)
        now = self._clock.now()
        if a is None or not a.reported or now - a.first_seen < window:
            return None
        return now - a.last_active >= window


def _log_transition(health: EndpointHealth, old: Health, new: Health, reason: str) -> None:
    level = logging.INFO if new is Health.HEALTHY else logging.WARNING
    log.log(
        level, "Replica health changed", extra={"pod": health.key, "from": old.value, "to": new.value, "reason": reason}
    )


def _escape(value: str) -> str:
    """Upstream's ``EscapePromQLValue``: backslashes doubled, double quotes escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


class PrometheusSource:
    """Upstream's queries against the Prometheus HTTP API (``/api/v1/query``)."""

    KV_QUERY = 'max by (pod) (max_over_time(vllm:kv_cache_usage_perc{{namespace="{ns}",model_name="{model}"}}[1m]))'
    QUEUE_QUERY = 'max by (pod) (max_over_time(vllm:num_requests_waiting{{namespace="{ns}",model_name="{model}"}}[1m]))'
    REQUESTS_QUERY = 'sum(increase(vllm:request_success_total{{namespace="{ns}",model_name="{model}"}}[{window}]))'

    def __init__(self, session: aiohttp.ClientSession, base_url: str, *, timeout: float = 10.0) -> None:
        self._session = session
        self._url = base_url.rstrip("/") + "/api/v1/query"
        self._timeout = timeout

    async def query(self, promql: str) -> list[tuple[Mapping[str, str], float]]:
        """An instant query's vector; NaN and ±Inf become 0 (upstream ``fixNaN``)."""
        try:
            async with (
                asyncio.timeout(self._timeout),
                self._session.get(self._url, params={"query": promql}) as resp,
            ):
                body: Any = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            raise InputError(f"Prometheus query {promql!r} failed: {e!r}") from e
        if not isinstance(body, Mapping) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, Mapping) else body
            raise InputError(f"Prometheus query {promql!r} failed: {error!r}")
        out: list[tuple[Mapping[str, str], float]] = []
        for series in (body.get("data") or {}).get("result") or ():
            try:
                value = float(series["value"][1])
            except (KeyError, IndexError, TypeError, ValueError) as e:
                raise InputError(f"Prometheus query {promql!r}: malformed sample {series!r}") from e
            out.append((series.get("metric") or {}, value if math.isfinite(value) else 0.0))
        return out

    def _fmt(self, template: str, key: ModelKey, **extra: str) -> str:
        return template.format(ns=_escape(key.namespace), model=_escape(key.model_id), **extra)

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> dict[str, ReplicaMetrics]:
        kv, queue = await asyncio.gather(
            self.query(self._fmt(self.KV_QUERY, key)), self.query(self._fmt(self.QUEUE_QUERY, key))
        )
        wanted = {p.name for p in pods}
        values: dict[str, list[float]] = {}
        for index, series in enumerate((kv, queue)):
            for labels, value in series:
                pod = labels.get("pod") or labels.get("pod_name")
                if pod in wanted:
                    values.setdefault(pod, [0.0, 0.0])[index] = value
        return {pod: ReplicaMetrics(pod, v[0], float(int(v[1]))) for pod, v in values.items()}

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        try:
            result = await self.query(self._fmt(self.REQUESTS_QUERY, key, window=f"{max(1, int(window))}s"))
        except InputError as e:
            log.warning("idle check failed; not scaling to zero", extra={"model": str(key), "error": str(e)})
            return None
        if not result:
            return None
        return result[0][1] == 0
