"""Composition root of ``epp serve``: builds every part, starts them in order, stops them in reverse.

Per pool, a :class:`~epp.pool_runtime.PoolRuntime`: a datastore, its reconcilers, scrapers, pool
gauges, state sync with the other replicas (``--state-sync-address``, ``statesync.replicas``) and
routing, and the configuration in force. Shared: the metrics (every area's series set declared at
once, ``epp.picker_series``), the kr8s API, the HTTP client plugins are handed
(``PluginContext.http``; its session opens on first use), the ext_proc/health servers, the metrics
server and the configuration watcher.

A configuration (at start, and each reload of ``--config-file``) is loaded on a worker thread:
decoding, validation, plugin instances, the files it names (tokenizers, certificates), with no
effect on anything running. A reload is refused whole when any pool refuses it (a change of flow
control, read once at startup: each pool's queue belongs to the pool, not the config); a refused
reload changes nothing but the watcher's failure counter and log line. Otherwise every pool puts
its configuration in force in one loop step (``PoolRuntime.apply``), and only then are the
configuration's notices logged and ``epp_config_ignored_settings`` set
(``compat.publish_notices``). ``--metrics-staleness-threshold`` becomes one
:class:`~epp.framework.staleness.Staleness`, handed to every pool's gauges and routing and to the
epp.v1 API.

Start order: logging → metrics → API client → config → datastores, routings and reconcilers →
scrapers → state sync → gRPC servers (NOT_SERVING) → metrics server → readiness follows the pools' sync.
Stop order: NOT_SERVING → gRPC stop with grace (in-flight streams finish) → tracing flush
(bounded) → config watcher → elector → state sync → plugins' background resources (KV-event subscribers) →
the plugins' HTTP client → reconcilers → scrapers → gauges → metrics server → API client.
With ``--workers`` > 1 this process is the parent of the pod's other serving processes
(:mod:`epp.workers`): it starts them once its own ext_proc port is bound (they bind it too),
forwards its scrapes and routing records to them, adds their request series to ``/metrics``, and
stops them beside its own gRPC server. A child runs this runtime too, with a ``child`` role: no
health, metrics or API port and no Lease (the pod's are the parent's).
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
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from epp.api.service import ApiSources, api_services
from epp.api.tls_port import ApiTlsPort
from epp.clock import Clock, SystemClock
from epp.config.compat import ConfigNotice
from epp.config.config_series import publish_notices
from epp.config.data_scope_series import DataScopeViolations
from epp.config.discovery_mode import check_discovery_options, discovery_configured
from epp.config.installed_plugins import discover
from epp.config.options import OptionsError, ServeOptions
from epp.config.reload import ConfigStatus, ConfigWatcher
from epp.config.tls_policy import apply_cipher_suites
from epp.datalayer.http_client import SessionClient
from epp.datalayer.scrape_process import ScrapeProcess
from epp.datastore.discovery_reconciler import DEFAULT_POOL_NAME
from epp.extproc.cert_reload import CertReloader, port_tls
from epp.extproc.health import DetailRelay
from epp.extproc.processor import StreamOptions
from epp.extproc.server import ExtProcOptions, ExtProcServer
from epp.extproc.tls import ServerTls, TlsConfig
from epp.framework.plugin import PluginRegistry
from epp.framework.staleness import Staleness
from epp.kube.client import Api, close_api, make_api
from epp.kube.leader import LeaderElector, pool_elector
from epp.kube.reviews import KubeReviewer
from epp.kube.standalone import standalone_pool_name
from epp.picker_series import declare_picker_series
from epp.plugins import register_in_tree
from epp.pool_runtime import Configs, PoolConfigLoader, PoolRuntime, refresh_gauges
from epp.requestcontrol.pool_routing import PoolKey
from epp.requestcontrol.pools import PoolPipelines
from epp.slo.series import SloSeries
from epp.statesync.metrics import SyncMetrics
from epp.tasks import Service, cancel_and_wait, start_guarded
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_auth import MetricsAuth
from epp.telemetry.metrics_server import HasRegistry, MetricsServer
from epp.telemetry.tracing import Tracing
from epp.workers.supervisor import Workers, WorkerSeries

if TYPE_CHECKING:
    from epp.workers.child import ChildRole

__all__ = ["Runtime", "RuntimePorts"]

log = logging.getLogger(__name__)


@dataclass
class RuntimePorts:
    """The ports actually bound (flags may ask for 0 = any free port)."""

    grpc: int = 0
    health: int = 0
    metrics: int = 0
    api: int = 0
    """The epp.v1 API's own TLS port; 0 when the API is on the health port or off."""


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
        child: ChildRole | None = None,
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
        self.staleness = Staleness(options.metrics_staleness_threshold)
        """``--metrics-staleness-threshold``, the one object every pool's gauges and routing and the API read."""
        self.ports = RuntimePorts()
        self.pools: list[PoolRuntime] = []
        self.config_status = ConfigStatus(_config_source(options))
        self._http = SessionClient()
        """The HTTP client plugins are given (``PluginContext.http``); closed once, at stop."""
        self._health_details = DetailRelay()
        """Where plugins set health details, held until the server's health state exists."""
        self._loader = PoolConfigLoader(
            self.registry,
            self.clock,
            options,
            self._http,
            extras={"latency_recorder": self.slo_series},
            health=self._health_details.set_detail,
        )
        self._keys: list[PoolKey] = []
        """The pools served, known once the configuration text is read (its ``dataLayer.discovery`` decides)."""
        self._readiness_interval = readiness_interval
        self._api: Api | None = None
        self._server: ExtProcServer | None = None
        self._api_port: ApiTlsPort | None = None
        self._metrics_server: MetricsServer | None = None
        self._watcher: ConfigWatcher | None = None
        self._readiness: asyncio.Task[None] | None = None
        self.elector: LeaderElector | None = None
        self._cert_reloader: CertReloader | None = None
        self._sync_metrics = SyncMetrics(self.metrics.registry) if options.state_sync is not None else None
        """The state sync's series, one set for every pool's sync (``--state-sync-address``)."""
        self.tracing: Tracing | None = None  # None unless --tracing and an exporter is configured
        self._child = child
        self.workers = Workers(options, self.metrics, self.clock) if options.workers > 1 and child is None else None
        """The pod's other serving processes (``--workers``), when this is their parent."""

    @property
    def server(self) -> ExtProcServer:
        if self._server is None:
            raise RuntimeError("runtime not started")
        return self._server

    def plugins(self) -> list[object]:
        """Every plugin of the configurations in force."""
        return [plugin for pool in self.pools for plugin in pool.config.plugins.values()]

    @property
    def ready(self) -> bool:
        """Every pool synced and, with leader election, this replica holds the lease."""
        synced = bool(self.pools) and all(p.synced for p in self.pools)
        if self._child is not None:  # a child is ready with its parent (the Lease is the parent's)
            return synced and self._child.parent_ready
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

    async def _load(self, text: str) -> Configs:
        """Every pool's configuration from ``text``, made on a worker thread (files read there); no effect."""
        return await asyncio.to_thread(self._loader.load, text, self._keys)

    async def start(self) -> None:
        o = self.options
        # Installed distributions' plugin types: their metadata only, off the loop (a clash fails here).
        await asyncio.to_thread(discover, self.registry)
        text = await asyncio.to_thread(self._config_text)
        self._keys = keys = await asyncio.to_thread(self._pool_keys, text)  # decodes the text
        configs = await self._load(text)  # a bad config fails before binding
        if o.tracing:  # a bad OTEL_* variable fails here too; imports and exporter set-up off the loop
            self.tracing = await asyncio.to_thread(Tracing.from_environment)
        if configs[keys[0]].discovery is None:  # with dataLayer.discovery: no Kubernetes at all
            self._api = await make_api(o.kubeconfig or None)
        for key in keys:
            pool = PoolRuntime.build(
                key,
                configs[key],
                api=self._api,
                options=o,
                staleness=self.staleness,
                metrics=self.metrics,
                clock=self.clock,
                rng=self.rng,
                sync_metrics=self._sync_metrics,
                wiring=self._child or self.workers,
            )
            if self.workers is not None:
                assert isinstance(pool.scrapers, ScrapeProcess)  # --workers implies --metrics-scrape-process
                self.workers.follow_scrapes(key, pool.scrapers)
            self.pools.append(pool)
        self._in_force(configs)
        for pool in self.pools:
            await pool.start()
        if o.leader_election and self._api is not None and self._child is None:
            self.elector = pool_elector(self._api, keys[0], o.lease_name_style, self.clock)
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
            shared_port=o.workers > 1,
        )
        endpoint = o.metrics_endpoint
        auth = None
        if endpoint.auth and self._api is not None:
            auth = MetricsAuth(KubeReviewer(self._api), clock=self.clock)
        api = None
        if o.epp_api and self._child is None:  # the epp.v1 API
            sources = ApiSources(self.pools, pipelines, self.config_status, self.clock, self.staleness)
            api = api_services(sources, auth)
        api_on_tls = api is not None and bool(endpoint.cert_dir)  # the health port stays plaintext for kubelet
        self._server = ExtProcServer(
            pipelines,
            self.metrics,
            options=stream_options,
            tracing=self.tracing,
            ext_proc=ext_proc,
            health_port_services=None if api_on_tls else api,
            streams=(
                self.metrics.series(WorkerSeries).streams_of(self._child.worker if self._child else 0)
                if o.workers > 1
                else None
            ),
        )
        self._health_details.bind(self._server.health)
        for pool in self.pools:
            if pool.state_sync is not None:
                pool.state_sync.report_health(self._server.health.set_detail)
        tls: ServerTls | None = None
        if o.tls.secure_serving:
            # `epp serve` exports the cipher list before grpc loads; here only a late attempt fails, loudly.
            apply_cipher_suites(o.tls.grpc_cipher_list)
            given = self._child.tls_pair if self._child else None  # the parent's: every worker serves one pair
            tls = await port_tls(o.tls.cert_path, reload=o.tls.cert_reload, given=given)
            self._cert_reloader = tls if isinstance(tls, CertReloader) else None
        self.ports.grpc, self.ports.health = await self._server.start(
            o.bind_address, o.grpc_port, None if self._child else o.grpc_health_port, tls
        )
        if self._child is not None:
            await self._start_following(text)
            return
        if self.workers is not None:
            await self.workers.start(
                self.ports.grpc, (tls.cert_pem, tls.key_pem) if isinstance(tls, TlsConfig) else None
            )
        if api is not None and api_on_tls:
            self._api_port = ApiTlsPort(api)
            self.ports.api = await self._api_port.start(
                o.bind_address, o.epp_api_port, cert_dir=endpoint.cert_dir, client_ca_file=endpoint.client_ca_file
            )
        served: HasRegistry = self.metrics
        before_scrape: list[Callable[[], None]] = [
            functools.partial(refresh_gauges, self.pools, self.metrics, self.slo_series)
        ]
        if self.workers is not None:
            served, more = self.workers.served_metrics(self.metrics, self.plugins)
            before_scrape += more
        self._metrics_server = MetricsServer(
            served,
            before_scrape=before_scrape,
            auth=auth,
            pprof=endpoint.pprof,
            cert_dir=endpoint.cert_dir,
            client_ca_file=endpoint.client_ca_file,
        )
        self.ports.metrics = await self._metrics_server.start(o.bind_address, o.metrics_endpoint.port)
        await self._start_following(text)
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

    async def _stop_serving(self, grace: float) -> None:
        """This process's gRPC servers and the children's, at once (open streams get ``grace`` in each)."""
        server, self._server = self._server, None
        await asyncio.gather(
            *([server.stop(grace)] if server is not None else []),
            *([self.workers.stop(grace)] if self.workers is not None else []),
        )

    async def _start_following(self, text: str) -> None:
        """The configuration file and readiness are followed from now on (a child's too: it reloads itself)."""
        o = self.options
        if o.config_file:
            self._watcher = ConfigWatcher(
                o.config_file, self._reload, self.config_status, clock=self.clock, metrics=self.metrics
            )
            await self._watcher.start(text)
        self._readiness = start_guarded(self._follow_readiness(), "epp-readiness", forever=True)

    async def _reload(self, text: str) -> None:
        """A changed config file (the watcher's ``apply``): loaded off the loop; refused whole (raises) when a
        pool refuses it; else in force in every pool in one loop step, then its notices published."""
        configs = await self._load(text)
        for pool in self.pools:
            refusal = pool.refusal(configs[pool.key])
            if refusal is not None:
                raise refusal
        for pool in self.pools:
            pool.apply(configs[pool.key])
        self._in_force(configs)

    def _in_force(self, configs: Configs) -> None:
        """Once ``configs`` are in force: their notices published, their plugins' data accesses counted."""
        publish_notices(_notices(configs), self.metrics)
        for config in configs.values():
            self.scope_violations.watch(config.data_scopes)

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
                if self.workers is not None:
                    self.workers.set_ready(ready)
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
        await self._stop_serving(grace)
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
            await pool.stop()
        self.pools.clear()
        if self._metrics_server is not None:
            await self._metrics_server.stop()
            self._metrics_server = None
        if self._api is not None:
            await close_api(self._api)
            self._api = None


def _config_source(options: ServeOptions) -> str:
    """Where the configuration comes from, as the epp.v1 Config API names it."""
    if options.config_file:
        return f"--config-file {options.config_file}"
    return "--config-text" if options.config_text else "default"


def _notices(configs: Configs) -> Iterable[ConfigNotice]:
    return (notice for config in configs.values() for notice in config.notices)
