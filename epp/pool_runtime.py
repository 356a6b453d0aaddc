"""One served pool, whole: its datastore, reconcilers, scrapers, gauges, state sync, routing and configuration.

``epp serve`` runs a :class:`PoolRuntime` per ``--pool-name`` (or for the standalone pool), each
with its own plugin instances, so per-endpoint plugin state never crosses pools. The pool owns
its configuration:

- :class:`PoolConfigLoader` makes one from the configuration text. Loading is pure (it imports
  the installed plugin types the text names, reads the files it names, tokenizers and
  certificates, and makes plugins that start nothing), so the runtime runs it on a worker
  thread and may drop the result;
- :meth:`PoolRuntime.refusal` says why a loaded configuration may not replace the one in force
  (it changes flow control or the endpoint discovery, both read once at startup), without any
  effect;
- :meth:`PoolRuntime.apply` puts it in force in one loop step: the scrapers take its data layer
  (``Scrapers.apply``), the routing its pipeline (``PoolRouting.apply``: stateful plugins hand
  over their state, the new plugins' metric series and background work start) and the state
  sync its plugins (``StateSync.bind``).

With ``--workers`` > 1 a :class:`PoolWiring` makes a pool's scrapers and state sync instead of the
options (:mod:`epp.workers`): a child's scrapers are fed by its parent, and every process's records
go through the parent unless the replicas' Valkey stream carries them.

What the configurations in force report of themselves goes to ``/metrics`` in one place,
:func:`refresh_gauges`, just before each scrape: the pools' gauges and what their plugins measure,
read through ``PoolRouting.measure`` as the epp.v1 Endpoints API reads the prefix index sizes.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from epp.clock import Clock
from epp.config.discovery_mode import discovery_refusal
from epp.config.loader import ConfigError, LoadedConfig, load_config, load_default_config
from epp.config.options import ServeOptions
from epp.datalayer.pool_gauges import PoolGauges
from epp.datalayer.scrape_process import make_scrapers
from epp.datalayer.scrape_spec import build_scrape_spec
from epp.datalayer.scraper import Scrapers
from epp.datastore.discovery_reconciler import DiscoveryReconciler
from epp.datastore.health_recorder import HealthRecorder
from epp.datastore.store import Datastore
from epp.framework.health import HealthPolicy
from epp.framework.http import HttpClient
from epp.framework.latency_predictor import predictor_stats
from epp.framework.plugin import Plugin, PluginContext, PluginRegistry
from epp.framework.staleness import Staleness
from epp.kube.client import Api
from epp.kube.manager import PoolReconcilers, StandaloneReconciler
from epp.requestcontrol.plugin_series import PluginSeries, Readings
from epp.requestcontrol.pool_routing import PoolKey, PoolRouting, RoutingOptions
from epp.slo.series import SloSeries
from epp.statesync.metrics import SyncMetrics
from epp.telemetry.metrics import EppMetrics

__all__ = ["PoolConfigLoader", "PoolRuntime", "PoolWiring", "StateSync", "refresh_gauges"]

Configs = dict[PoolKey, LoadedConfig]


class StateSync(Protocol):
    """A pool's routing state shared with other pickers: replicas over Valkey, or the processes of one pod."""

    def bind(self, plugins: Mapping[str, Plugin]) -> None: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def refresh(self) -> None: ...

    def report_health(self, set_detail: Callable[[str, bool], None]) -> None: ...


class PoolWiring(Protocol):
    """Where a pool's scrapers and state sync come from when this process is one of several (``--workers``)."""

    def scrapers(self, key: PoolKey, datastore: Datastore) -> Scrapers | None:
        """The pool's scrapers; None: made from the options, as with one process."""

    def state_sync(self, key: PoolKey, datastore: Datastore, plugins: Mapping[str, Plugin]) -> StateSync | None:
        """The pool's sync; None: from the options (``--state-sync-address``, else none)."""


@dataclass(frozen=True, slots=True)
class PoolConfigLoader:
    """Makes each pool's configuration from one text; pure and thread-safe (the runtime calls it on a worker thread)."""

    registry: PluginRegistry
    clock: Clock
    options: ServeOptions
    http: HttpClient | None = None
    """The runtime's shared client, handed to every plugin (``PluginContext.http``)."""
    extras: Mapping[str, Any] = field(default_factory=dict)
    """Shared services the plugins are handed (``PluginContext.extras``: the SLO latency recorder)."""
    health: Callable[[str, bool], None] | None = None
    """Where plugins set health details (``PluginContext.health``)."""

    def load(self, text: str, keys: Sequence[PoolKey]) -> Configs:
        """One set of plugin instances per pool, all from ``text`` (blank: the default profile); raises ConfigError."""
        o = self.options
        build_scrape = functools.partial(build_scrape_spec, flags=o.model_server_metrics)
        configs: Configs = {}
        for key in keys:
            context = PluginContext(
                clock=self.clock,
                pool_name=key[1],
                pool_namespace=key[0],
                http=self.http,
                extras=self.extras,
                health=self.health,
                serving_processes=o.workers,
            )
            if text.strip():
                configs[key] = load_config(
                    text,
                    self.registry,
                    context,
                    allow_experimental_plugins=o.allow_experimental_plugins,
                    build_scrape=build_scrape,
                )
            else:
                configs[key] = load_default_config(self.registry, context, build_scrape=build_scrape)
        return configs


@dataclass
class PoolRuntime:
    """Everything that belongs to one pool; :meth:`build` makes it around its first configuration."""

    key: PoolKey
    datastore: Datastore
    reconciler: PoolReconcilers | StandaloneReconciler | DiscoveryReconciler
    scrapers: Scrapers
    gauges: PoolGauges
    routing: PoolRouting
    state_sync: StateSync | None = None
    """Its state shared with the other replicas through Valkey (``--state-sync-address``) or with the other
    processes of the pod (``--workers``); None without either."""
    unsubscribe: Callable[[], None] = field(default=lambda: None)

    @classmethod
    def build(
        cls,
        key: PoolKey,
        config: LoadedConfig,
        *,
        api: Api | None,
        options: ServeOptions,
        staleness: Staleness,
        metrics: EppMetrics,
        clock: Clock,
        rng: random.Random,
        sync_metrics: SyncMetrics | None = None,
        wiring: PoolWiring | None = None,
    ) -> PoolRuntime:
        """The pool's parts, ``config`` in force; nothing runs before :meth:`start`."""
        o = options
        health = HealthRecorder(metrics, key[1])
        datastore = Datastore(
            metrics_port=o.model_server_metrics.port or 0, health=HealthPolicy(on_transition=health.transition)
        )
        reconciler: PoolReconcilers | StandaloneReconciler | DiscoveryReconciler
        if config.discovery is not None:
            reconciler = DiscoveryReconciler(config.discovery, datastore, pool_name=key[1], namespace=key[0])
        elif api is None:
            raise RuntimeError("the Kubernetes API client is not made")
        elif o.standalone:
            reconciler = StandaloneReconciler(
                api,
                datastore,
                selector=o.selector,
                target_ports=o.endpoint_target_ports,
                namespace=key[0],
                pool_name=key[1],
            )
        else:
            reconciler = PoolReconcilers(
                api, datastore, pool_name=key[1], namespace=key[0], pool_group=o.pool_group, metrics=metrics
            )
        scrapers = (wiring.scrapers(key, datastore) if wiring else None) or make_scrapers(
            datastore,
            clock,
            metrics,
            interval=o.refresh_metrics_interval,
            spec=config.scrape,
            worker_process=o.metrics_scrape_process,
            logging_options=o.logging,
        )
        gauges = PoolGauges(
            datastore, metrics, clock, interval=o.refresh_prometheus_metrics_interval, staleness=staleness
        )
        routing_options = RoutingOptions(
            staleness=staleness, emit_endpoint_scores=o.emit_endpoint_scores, conformance_hooks=o.conformance_test_hooks
        )
        routing = PoolRouting(key, datastore, config, metrics=metrics, clock=clock, rng=rng, options=routing_options)
        pool = cls(key, datastore, reconciler, scrapers, gauges, routing)
        pool.state_sync = wiring.state_sync(key, datastore, config.plugins) if wiring else None
        if pool.state_sync is None and o.state_sync is not None:
            # Imported only when asked for: redis-py imports the OpenTelemetry SDK at import time.
            from epp.statesync.replicas import ReplicaSync

            if sync_metrics is None:
                raise ValueError("state sync needs its metrics (SyncMetrics)")
            pool.state_sync = ReplicaSync(
                key, datastore, o.state_sync, config.plugins, clock=clock, metrics=sync_metrics
            )
        pool.unsubscribe = datastore.subscribe(health.on_endpoints)
        return pool

    @property
    def synced(self) -> bool:
        return self.reconciler.synced.is_set()

    @property
    def config(self) -> LoadedConfig:
        """The configuration in force."""
        return self.routing.config

    def refusal(self, config: LoadedConfig) -> ConfigError | None:
        """Why ``config`` may not replace the configuration in force (it changes flow control or the endpoint
        discovery, both read once at startup), or None; no effect either way."""
        return self.routing.refusal(config) or discovery_refusal(self.config, config)

    def apply(self, config: LoadedConfig) -> None:
        """Put ``config`` in force, in this loop step: the scrapers' data layer, then the routing's pipeline."""
        self.scrapers.apply(config.scrape)
        self.routing.apply(config)
        if self.state_sync is not None:
            self.state_sync.bind(config.plugins)

    async def start(self) -> None:
        await self.reconciler.start()
        await self.scrapers.start()
        await self.gauges.start()
        await self.routing.start()
        if self.state_sync is not None:
            await self.state_sync.start()

    async def stop(self) -> None:
        """Stop following the cluster and the endpoints (the routing is stopped and closed by the runtime first)."""
        self.unsubscribe()
        await self.reconciler.stop()
        await self.scrapers.stop()
        await self.gauges.stop()


def refresh_gauges(pools: Sequence[PoolRuntime], metrics: EppMetrics, slo: SloSeries) -> None:
    """Before each ``/metrics`` scrape: every pool's gauges and state sync, and what the plugins in force
    measure (prefix indexes, KV events), every pool's into one reading, summed where labels meet; the
    latency predictors' counts, from every plugin holding one (``LatencyPredicting``)."""
    readings = Readings()
    for pool in pools:
        pool.gauges.refresh()
        if pool.state_sync is not None:
            pool.state_sync.refresh()
        pool.routing.measure(readings)
    metrics.series(PluginSeries).publish(readings)
    slo.mirror(predictor_stats(p for pool in pools for p in pool.config.plugins.values()))
