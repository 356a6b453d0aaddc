"""Composition root of ``epp serve``: builds every part, starts them in order, stops them in reverse.

Per pool (``PoolRuntime``): a datastore, its reconcilers, its scrapers, its pool gauges, its state
sync with the other replicas (``--state-sync-address``, ``statesync.replicas``) and its
routing (``requestcontrol.pool_routing.PoolRouting``: its own plugin instances, so per-endpoint
plugin state never crosses pools, the pipeline of the configuration in force, the flow controller).
Shared: the metrics (every area's series set declared at once, ``epp.picker_series``), the kr8s
API, the HTTP client plugins are handed (``PluginContext.http``; its session opens on first use),
the ext_proc/health servers, the metrics server and the configuration watcher. A reloaded
configuration is swapped in whole, and in the same step each pool's scrapers take its data layer
(``Scrapers.apply``) and its routing the new pipeline (``PoolRouting.apply``: stateful
plugins hand over their state). Each pool's flow controller (the ``flowControl`` gate) belongs to
the pool, not the config: a reload keeps its queue, and one that changes the flow-control
settings is refused.

Start order: logging → metrics → API client → config → datastores, routings and reconcilers →
scrapers → state sync → gRPC servers (NOT_SERVING) → metrics server → readiness follows the pools' sync.
Stop order: NOT_SERVING → gRPC stop with grace (in-flight streams finish) → tracing flush
(bounded) → config watcher → elector → state sync → plugins' background resources (KV-event subscribers) →
the plugins' HTTP client → reconcilers → scrapers → gauges → metrics server → API client.
Tracing (``--tracing`` with an exporter) is set up right after the configuration is read. The
``epp.v1`` API (``--epp-api``) rides on the health port, behind the ``/metrics`` authorizer; with
``--metrics-cert-dir`` it has its own port (``--epp-api-port``) behind the metrics TLS instead,
started after the gRPC servers and stopped right after them.
A graceful shutdown (SIGTERM, see ``epp/serve_command.py``) first calls :meth:`Runtime.drain`
(health port NOT_SERVING, Lease released, everything else keeps running for ``--drain-timeout``),
then the stop above, whose gRPC step stops taking streams and lets open ones finish.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import random
import socket
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from epp.api.auth import ApiAuthInterceptor
from epp.api.service import ApiSources, add_api
from epp.api.tls_port import ApiTlsPort
from epp.clock import Clock, SystemClock
from epp.config.compat import log_notices
from epp.config.data_scope_series import DataScopeViolations
from epp.config.discovery_mode import check_discovery_options, discovery_configured, discovery_refusal
from epp.config.installed_plugins import discover, import_named
from epp.config.loader import LoadedConfig, load_config, load_default_config
from epp.config.options import OptionsError, ServeOptions
from epp.config.reload import ConfigHolder, ConfigWatcher
from epp.config.tls_policy import apply_cipher_suites
from epp.datalayer.http_client import SessionClient
from epp.datalayer.pool_gauges import PoolGauges
from epp.datalayer.scrape_process import make_scrapers
from epp.datalayer.scrape_spec import build_scrape_spec
from epp.datalayer.scraper import Scrapers
from epp.datastore.discovery_reconciler import DEFAULT_POOL_NAME, DiscoveryReconciler
from epp.datastore.health_recorder import HealthRecorder
from epp.datastore.store import Datastore
from epp.extproc.cert_reload import CertReloader
from epp.extproc.processor import StreamOptions
from epp.extproc.server import ExtProcOptions, ExtProcServer, ExtraServices
from epp.extproc.tls import ServerTls, TlsConfig
from epp.framework.health import HealthPolicy
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.kube.client import Api, close_api, make_api
from epp.kube.leader import LeaderElector, lease_name
from epp.kube.manager import PoolReconcilers, StandaloneReconciler
from epp.kube.reviews import KubeReviewer
from epp.kube.standalone import standalone_pool_name
from epp.picker_series import declare_picker_series
from epp.plugins import register_in_tree
from epp.plugins.predicted_latency_producer import PredictedLatencyProducer
from epp.requestcontrol.plugin_series import PluginSeries
from epp.requestcontrol.pool_routing import PoolKey, PoolRouting, RoutingOptions
from epp.requestcontrol.pools import PoolPipelines
from epp.slo.series import SloSeries
from epp.statesync.metrics import SyncMetrics
from epp.tasks import Service, cancel_and_wait, start_guarded
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_auth import MetricsAuth
from epp.telemetry.metrics_server import MetricsServer
from epp.telemetry.tracing import Tracing

__all__ = ["PoolRuntime", "Runtime", "RuntimePorts"]

if TYPE_CHECKING:
    from epp.statesync.replicas import ReplicaSync

log = logging.getLogger(__name__)

Configs = dict[PoolKey, LoadedConfig]


@dataclass
class RuntimePorts:
    """The ports actually bound (flags may ask for 0 = any free port)."""

    grpc: int = 0
    health: int = 0
    metrics: int = 0
    api: int = 0
    """The epp.v1 API's own TLS port; 0 when the API is on the health port or off."""


@dataclass
class PoolRuntime:
    """Everything that belongs to one pool."""

    key: PoolKey
    datastore: Datastore
    reconciler: PoolReconcilers | StandaloneReconciler | DiscoveryReconciler
    scrapers: Scrapers
    gauges: PoolGauges
    routing: PoolRouting
    state_sync: ReplicaSync | None = None
    unsubscribe: Callable[[], None] = field(default=lambda: None)

    @property
    def synced(self) -> bool:
        return self.reconciler.synced.is_set()


class Runtime(Service):
    """The running picker; ``async with Runtime(options):`` or ``start()`` / ``stop()``."""

    def __init__(
        self,
        options: ServeOptions,
        *,
        clock: Clock | None = None,
        metrics: EppMetrics | None = None,
        rng: random.Random | None = None,
        readiness_interval: float = 0.1,
    ) -> None:
        self.options = options
        self.clock = clock or SystemClock()
        self.metrics = metrics or EppMetrics(naming=options.metrics_naming)
        declare_picker_series(self.metrics)
        self.slo_series = self.metrics.series(SloSeries)
        self.scope_violations = self.metrics.series(DataScopeViolations)
        self.rng = rng or random.Random()
        self.registry = PluginRegistry()
        register_in_tree(self.registry)
        self.ports = RuntimePorts()
        self.pools: list[PoolRuntime] = []
        self.configs: ConfigHolder[Configs] | None = None
        self._readiness_interval = readiness_interval
        self._api: Api | None = None
        self._http = SessionClient()
        """The HTTP client plugins are given (``PluginContext.http``); closed once, at stop."""
        self._server: ExtProcServer | None = None
        self._api_port: ApiTlsPort | None = None
        self._metrics_server: MetricsServer | None = None
        self._watcher: ConfigWatcher[Configs] | None = None
        self._readiness: asyncio.Task[None] | None = None
        self.elector: LeaderElector | None = None
        self._cert_reloader: CertReloader | None = None
        self._sync_metrics: SyncMetrics | None = None
        self.tracing: Tracing | None = None  # None unless --tracing and an exporter is configured

    @property
    def server(self) -> ExtProcServer:
        if self._server is None:
            raise RuntimeError("runtime not started")
        return self._server

    @property
    def ready(self) -> bool:
        """Every pool synced and, with leader election, this replica holds the lease."""
        synced = bool(self.pools) and all(p.synced for p in self.pools)
        return synced and (self.elector is None or self.elector.is_leader)

    def _pool_keys(self, text: str) -> list[PoolKey]:
        o = self.options
        if discovery_configured(text):
            check_discovery_options(o)
            return [(o.pool_namespace, o.pool_names[0] if o.pool_names else DEFAULT_POOL_NAME)]
        if o.standalone:
            return [(o.pool_namespace, standalone_pool_name(os.environ.get("POD_NAME")))]
        if not o.pool_names:
            raise OptionsError(
                "exactly one of --pool-name or --endpoint-selector must be set (or a configuration whose "
                "dataLayer.discovery lists the endpoints)"
            )
        return [(o.pool_namespace, name) for name in o.pool_names]

    def _config_text(self) -> str:
        o = self.options
        if o.config_file:
            with open(o.config_file, encoding="utf-8") as f:
                return f.read()
        return o.config_text

    def _load_configs(self, text: str, keys: Sequence[PoolKey]) -> Configs:
        """One set of plugin instances per pool, all from the same configuration text."""
        build_scrape = functools.partial(build_scrape_spec, flags=self.options.model_server_metrics)
        configs: Configs = {}
        for key in keys:
            context = PluginContext(
                clock=self.clock, pool_name=key[1], http=self._http, extras={"latency_recorder": self.slo_series}
            )
            if text.strip():
                configs[key] = load_config(
                    text,
                    self.registry,
                    context,
                    metrics=self.metrics,
                    allow_experimental_plugins=self.options.allow_experimental_plugins,
                    build_scrape=build_scrape,
                )
            else:
                configs[key] = load_default_config(
                    self.registry, context, metrics=self.metrics, build_scrape=build_scrape
                )
        log_notices(notice for config in configs.values() for notice in config.notices)
        for config in configs.values():
            self.scope_violations.watch(config.data_scopes)
        return configs

    async def start(self) -> None:
        o = self.options
        # Installed distributions' plugin types: their metadata only, off the loop (a clash fails here).
        await asyncio.to_thread(discover, self.registry)
        text = await asyncio.to_thread(self._config_text)
        keys = self._pool_keys(text)
        await asyncio.to_thread(import_named, self.registry, text)  # the installed types it names, off the loop
        self.configs = ConfigHolder(self._load_configs(text, keys))  # a bad config fails before binding
        if o.tracing:  # a bad OTEL_* variable fails here too; imports and exporter set-up off the loop
            self.tracing = await asyncio.to_thread(Tracing.from_environment)
        holder = self.configs
        if holder.current[keys[0]].discovery is None:  # with dataLayer.discovery: no Kubernetes at all
            self._api = await make_api(o.kubeconfig or None)
        for key in keys:
            self.pools.append(self._build_pool(key, holder))
        for pool in self.pools:
            await pool.reconciler.start()
            await pool.scrapers.start()
            await pool.gauges.start()
            await pool.routing.start()
            if pool.state_sync is not None:
                await pool.state_sync.start()
        if o.leader_election and self._api is not None:
            identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
            namespace, name = keys[0]
            self.elector = LeaderElector(
                self._api,
                namespace=namespace,
                name=lease_name(namespace, name, o.lease_name_style),
                identity=identity,
                clock=self.clock,
            )
            await self.elector.start()
        pipelines = PoolPipelines({p.key: p.routing for p in self.pools})
        stream_options = StreamOptions(
            max_request_body_bytes=o.max_request_body_bytes,
            disable_subset_filter=o.disable_endpoint_subset_filter,
            conformance_test_hooks=o.conformance_test_hooks,
        )
        ext_proc = ExtProcOptions(
            health_checking=o.health_checking,
            max_recv_msg_size=o.grpc_max_recv_msg_size,
            max_send_msg_size=o.grpc_max_send_msg_size,
            stream_metrics=o.enable_grpc_stream_metrics,
        )
        endpoint = o.metrics_endpoint
        auth = None
        if endpoint.auth and self._api is not None:
            auth = MetricsAuth(KubeReviewer(self._api), clock=self.clock)
        api = self._api_services(pipelines, holder, auth)
        api_on_tls = api is not None and bool(endpoint.cert_dir)  # the health port stays plaintext for kubelet
        self._server = ExtProcServer(
            pipelines,
            self.metrics,
            options=stream_options,
            tracing=self.tracing,
            ext_proc=ext_proc,
            health_port_services=None if api_on_tls else api,
        )
        for pool in self.pools:
            if pool.state_sync is not None:
                pool.state_sync.report_health(self._server.health.set_detail)
        tls = await self._server_tls() if o.tls.secure_serving else None
        self.ports.grpc, self.ports.health = await self._server.start(
            o.bind_address, o.grpc_port, o.grpc_health_port, tls
        )
        if api is not None and api_on_tls:
            self._api_port = ApiTlsPort(api)
            self.ports.api = await self._api_port.start(
                o.bind_address, o.epp_api_port, cert_dir=endpoint.cert_dir, client_ca_file=endpoint.client_ca_file
            )
        self._metrics_server = MetricsServer(
            self.metrics,
            before_scrape=[self._refresh_gauges],
            auth=auth,
            pprof=endpoint.pprof,
            cert_dir=endpoint.cert_dir,
            client_ca_file=endpoint.client_ca_file,
        )
        self.ports.metrics = await self._metrics_server.start(o.bind_address, o.metrics_endpoint.port)
        if o.config_file:
            self._watcher = ConfigWatcher(
                o.config_file,
                holder,
                lambda t: self._reloaded(t, keys),
                clock=self.clock,
                metrics=self.metrics,
                on_swap=self._apply_reload,
                prepare=lambda t: import_named(self.registry, t),
            )
            await self._watcher.start(text)
        self._readiness = start_guarded(self._follow_readiness(), "epp-readiness", forever=True)
        log.info(
            "epp serving",
            extra={
                "pools": [f"{ns}/{name}" for ns, name in keys],
                "grpc_port": self.ports.grpc,
                "health_port": self.ports.health,
                "metrics_port": self.ports.metrics,
                "epp_api_port": self.ports.api or None,
            },
        )

    def _reloaded(self, text: str, keys: Sequence[PoolKey]) -> Configs:
        """A changed config file, loaded; refused when it changes flow control, which is read once at startup."""
        configs = self._load_configs(text, keys)
        for pool in self.pools:
            refusal = pool.routing.refusal(configs[pool.key]) or discovery_refusal(
                self.configs.current[pool.key] if self.configs is not None else None, configs[pool.key]
            )
            if refusal is not None:
                raise refusal
        return configs

    def _api_services(
        self, pipelines: PoolPipelines, holder: ConfigHolder[Configs], auth: MetricsAuth | None
    ) -> ExtraServices | None:
        """The epp.v1 API, guarded by the /metrics authorizer; None when it is off."""
        o = self.options
        if not o.epp_api:
            return None
        source = f"--config-file {o.config_file}" if o.config_file else "--config-text" if o.config_text else "default"
        sources = ApiSources(
            pools=self.pools,
            pipelines=pipelines,
            generation=lambda: holder.generation,
            last_reload=lambda: (self._watcher is not None, self._watcher.last_error if self._watcher else ""),
            config_source=source,
            clock=self.clock,
            staleness_threshold=o.metrics_staleness_threshold,
        )
        interceptors = (ApiAuthInterceptor(auth, "/epp.v1."),) if auth is not None else ()
        return ExtraServices(lambda server: add_api(server, sources), interceptors)

    async def _server_tls(self) -> ServerTls:
        """The ext_proc port's certificate: mounted (and watched with --enable-cert-reload) or self-signed."""
        o = self.options.tls
        # `epp serve` exports the cipher list before grpc loads; here only a late attempt fails, loudly.
        apply_cipher_suites(o.grpc_cipher_list)
        # Reading the files or generating an RSA-4096 key (~0.35 s) happens off the loop.
        pair = await asyncio.to_thread(TlsConfig.from_cert_path, o.cert_path or None)
        if not o.cert_reload:
            return pair
        self._cert_reloader = CertReloader(o.cert_path, pair)
        await self._cert_reloader.start()
        return self._cert_reloader

    def _build_pool(self, key: PoolKey, holder: ConfigHolder[Configs]) -> PoolRuntime:
        o = self.options
        health = HealthRecorder(self.metrics, key[1])
        datastore = Datastore(
            metrics_port=o.model_server_metrics.port or 0, health=HealthPolicy(on_transition=health.transition)
        )
        reconciler: PoolReconcilers | StandaloneReconciler | DiscoveryReconciler
        discovery = holder.current[key].discovery
        if discovery is not None:
            reconciler = DiscoveryReconciler(discovery, datastore, pool_name=key[1], namespace=key[0])
        elif self._api is None:
            raise RuntimeError("the Kubernetes API client is not made")
        elif o.standalone:
            reconciler = StandaloneReconciler(
                self._api,
                datastore,
                selector=o.selector,
                target_ports=o.endpoint_target_ports,
                namespace=key[0],
                pool_name=key[1],
            )
        else:
            reconciler = PoolReconcilers(
                self._api,
                datastore,
                pool_name=key[1],
                namespace=key[0],
                pool_group=o.pool_group,
                metrics=self.metrics,
            )
        scrapers = make_scrapers(
            datastore,
            self.clock,
            self.metrics,
            interval=o.refresh_metrics_interval,
            spec=holder.current[key].scrape,
            worker_process=o.metrics_scrape_process,
            logging_options=o.logging,
        )
        gauges = PoolGauges(
            datastore,
            self.metrics,
            self.clock,
            interval=o.refresh_prometheus_metrics_interval,
            staleness_threshold=o.metrics_staleness_threshold,
        )
        routing = PoolRouting(
            key,
            datastore,
            holder.current[key],
            metrics=self.metrics,
            clock=self.clock,
            rng=self.rng,
            options=RoutingOptions(
                staleness_threshold=o.metrics_staleness_threshold,
                emit_endpoint_scores=o.emit_endpoint_scores,
                conformance_hooks=o.conformance_test_hooks,
            ),
        )
        pool = PoolRuntime(key, datastore, reconciler, scrapers, gauges, routing)
        if o.state_sync is not None:
            # Imported only when asked for: redis-py imports the OpenTelemetry SDK at import time.
            from epp.statesync.replicas import ReplicaSync

            if self._sync_metrics is None:
                self._sync_metrics = SyncMetrics(self.metrics.registry)
            pool.state_sync = ReplicaSync(
                key, datastore, o.state_sync, routing.config.plugins, clock=self.clock, metrics=self._sync_metrics
            )
        pool.unsubscribe = datastore.subscribe(health.on_endpoints)
        return pool

    def _apply_reload(self, old: Configs, new: Configs) -> None:
        """A reloaded configuration, in the same loop step as the swap: each pool's scrapers take its data
        layer and its routing the new pipeline (``PoolRouting.apply``)."""
        for pool in self.pools:
            pool.scrapers.apply(new[pool.key].scrape)
            pool.routing.apply(new[pool.key])
            if pool.state_sync is not None:
                pool.state_sync.bind(new[pool.key].plugins)

    def _refresh_gauges(self) -> None:
        """Just before a scrape: the pool gauges, and what the plugins in force measure (every pool's)."""
        for pool in self.pools:
            pool.gauges.refresh()
            if pool.state_sync is not None:
                pool.state_sync.refresh()
        plugins = [plugin for pool in self.pools for plugin in pool.routing.config.plugins.values()]
        self.metrics.series(PluginSeries).publish(plugins)
        self.slo_series.mirror(
            (p.typed_name.name, p.predictor.stats)
            for p in plugins
            if isinstance(p, PredictedLatencyProducer) and p.predictor is not None
        )

    async def _flush_tracing(self) -> None:
        """Stop step: every stream has ended (so have their spans); export what is queued, bounded."""
        tracing, self.tracing = self.tracing, None
        if tracing is not None:
            await tracing.shutdown()

    async def _follow_readiness(self) -> None:
        """SERVING once every pool has synced; back to NOT_SERVING if a pool goes away."""
        current: bool | None = None
        while True:
            ready = self.ready
            if ready != current:
                self.server.set_ready(ready)
                log.info("readiness changed", extra={"ready": ready})
                current = ready
            await self.clock.sleep(self._readiness_interval)

    async def drain(self) -> None:
        """Graceful shutdown's first step (SIGTERM): stop looking ready, hand the Lease over, keep serving.

        The health port turns NOT_SERVING (all but ``liveness``) at once and readiness is no longer
        followed, so kubelet takes the pod out of the Service; a held Lease is released so a
        follower takes over without waiting for it to expire. ext_proc keeps serving new and open
        streams until :meth:`stop`. Reconcilers, scrapers, the config watcher and ``/metrics`` keep
        running: streams of the drain window are routed on the live pool. (Upstream stops its
        manager here and routes on the last-known endpoints, which would send requests to pods a
        model-server rollout deletes meanwhile.)
        """
        await cancel_and_wait(self._readiness)
        self._readiness = None
        if self._server is not None:
            self._server.drain()
        log.info("draining: NOT_SERVING, ext_proc still serving")
        if self.elector is not None:
            await self.elector.stop()  # releases the Lease
            self.elector = None

    async def stop(self, grace: float = 5.0) -> None:
        """Stop in reverse order; safe to call after a failed or partial start (or after :meth:`drain`).

        The gRPC servers stop taking streams at once; open ones get up to ``grace`` seconds.
        """
        await cancel_and_wait(self._readiness)
        self._readiness = None
        for pool in self.pools:  # queued requests end with 503 rejected-shutting-down before the grace starts
            await pool.routing.stop()
        if self._server is not None:
            await self._server.stop(grace)
            self._server = None
        if self._api_port is not None:
            await self._api_port.stop(grace)
            self._api_port = None
        if self._cert_reloader is not None:
            await self._cert_reloader.stop()
            self._cert_reloader = None
        await self._flush_tracing()
        if self._watcher is not None:
            await self._watcher.stop()
            self._watcher = None
        if self.elector is not None:
            await self.elector.stop()
            self.elector = None
        for pool in self.pools:
            if pool.state_sync is not None:
                await pool.state_sync.stop()
        for pool in self.pools:  # plugins' background resources (KV-event subscribers, tokenizer threads)
            await pool.routing.aclose()
        await self._http.aclose()
        for pool in reversed(self.pools):
            pool.unsubscribe()
            await pool.reconciler.stop()
            await pool.scrapers.stop()
            await pool.gauges.stop()
        self.pools.clear()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None
        if self._api is not None:
            await close_api(self._api)
            self._api = None
