"""Reading each Ready pod's ``/metrics`` directly: the default source, no Prometheus needed.

Per pod, per cycle, concurrently, each with a deadline. The V1 pair (KV use, waiting requests)
comes through the picker's data layer (:mod:`epp.datalayer`), so every engine type the picker
knows (pod label ``inference.networking.k8s.io/engine-type``) works. vLLM and SGLang pages also
give the V2 and throughput inputs (:mod:`epp.autoscale.series`): the KV capacity in tokens, and
counters whose rates over the last cycles (:mod:`epp.autoscale.rates`) are the workload shape and
speed upstream reads from Prometheus. A vLLM page labelled with several ``engine`` values is one
reading per data-parallel rank.

Each pod's health follows the picker's state machine (:mod:`epp.framework.health`): a refused or
reset scrape makes it unreachable, a timeout or a non-200 suspect, and a pod held out of service
gives no reading until its back-off is over; each change logs one line.

Idleness (for scale-to-zero) needs positive evidence: the group has been watched for the whole
window without a running or waiting request or a rise in completed requests. Unknown is ``None``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from epp.autoscale.engine_args import SGLANG, VLLM
from epp.autoscale.inputs import ModelSignals, PodTarget
from epp.autoscale.rates import CounterWindow
from epp.autoscale.series import RankReading, read_page
from epp.autoscale.types import ModelKey, ReplicaMetrics
from epp.clock import Clock
from epp.datalayer.engines import engine_spec, extract
from epp.datalayer.promtext import parse
from epp.framework.endpoint import join_host_port
from epp.framework.health import EndpointHealth, Health, HealthPolicy

__all__ = ["ScrapeSource"]

log = logging.getLogger(__name__)


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
        self._windows: dict[ModelKey, dict[str, CounterWindow]] = {}  # per instance, per group
        self._health: dict[ModelKey, dict[str, EndpointHealth]] = {}  # per pod asked about last, per group
        self._policy = HealthPolicy(on_transition=_log_transition)

    def health(self, key: ModelKey, pod: str) -> Health | None:
        """The pod's health as of the group's last collection (None: not asked about then)."""
        health = self._health.get(key, {}).get(pod)
        return None if health is None else health.state

    async def _fetch(self, pod: PodTarget, health: EndpointHealth) -> bytes | None:
        url = f"http://{join_host_port(pod.address, pod.port)}/metrics"
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
        return body

    def _single(self, pod: PodTarget, body: bytes) -> tuple[float, float, float] | None:
        """``(kv, waiting, running)`` through the picker's engine tables (any engine type)."""
        extraction = extract(parse(body, engine_spec(pod.engine).names), engine_spec(pod.engine))
        if not extraction.updated:
            log.debug("scrape had no load metrics", extra={"pod": pod.name, "errors": extraction.errors})
            return None
        snap = extraction.snapshot
        return snap.kv_cache_usage, float(snap.waiting_queue), float(snap.running)

    def _reading(
        self, pod: PodTarget, rank: RankReading, gauges: tuple[float, float, float], windows: dict[str, CounterWindow]
    ) -> tuple[ReplicaMetrics, bool]:
        instance = f"{pod.name}:{rank.rank}" if rank.rank else pod.name
        window = windows.setdefault(instance, CounterWindow())
        window.add(self._clock.now(), rank.counters)
        kv, waiting, running = gauges
        reading = window.shaped(
            ReplicaMetrics(
                pod=pod.name, kv_cache_usage=kv, queue_length=waiting, instance=instance, tokens_capacity=rank.capacity
            )
        )
        return reading, running > 0 or waiting > 0 or window.rose("done")

    async def _scrape(
        self, pod: PodTarget, health: EndpointHealth, windows: dict[str, CounterWindow]
    ) -> list[tuple[ReplicaMetrics, bool]]:
        body = await self._fetch(pod, health)
        if body is None:
            return []
        engine = SGLANG if pod.engine == SGLANG else VLLM
        ranks = read_page(body, engine) if pod.engine in (VLLM, SGLANG) else [RankReading("", None, None, None)]
        if len(ranks) > 1:  # data-parallel ranks: each rank's own gauges
            return [
                self._reading(pod, r, (r.kv or 0.0, r.waiting or 0.0, r.running or 0.0), windows)
                for r in ranks
                if r.kv is not None or r.waiting is not None
            ]
        gauges = self._single(pod, body)
        return [] if gauges is None else [self._reading(pod, ranks[0], gauges, windows)]

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> list[ReplicaMetrics]:
        known = self._health.get(key, {})
        healths = {p.name: known.get(p.name) or EndpointHealth(f"{p.namespace}/{p.name}", self._policy) for p in pods}
        self._health[key] = healths  # pods gone: forgotten
        names = {p.name for p in pods}
        windows = {i: w for i, w in self._windows.get(key, {}).items() if i.split(":")[0] in names}
        results = await asyncio.gather(*(self._scrape(p, healths[p.name], windows) for p in pods))
        self._windows[key] = windows
        now = self._clock.now()
        activity = self._activity.setdefault(key, _Activity(first_seen=now, last_active=now))
        readings = [r for per_pod in results for r, _ in per_pod]
        activity.reported = bool(readings)
        if any(active for per_pod in results for _, active in per_pod):
            activity.last_active = now
        return readings

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        a = self._activity.get(key)
        now = self._clock.now()
        if a is None or not a.reported or now - a.first_seen < window:
            return None
        return now - a.last_active >= window

    async def model_signals(self, key: ModelKey) -> ModelSignals | None:
        return None  # the pickers' own pages say it (--epp-metrics-url)


def _log_transition(health: EndpointHealth, old: Health, new: Health, reason: str) -> None:
    level = logging.INFO if new is Health.HEALTHY else logging.WARNING
    log.log(
        level, "Replica health changed", extra={"pod": health.key, "from": old.value, "to": new.value, "reason": reason}
    )
