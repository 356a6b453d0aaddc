"""The flags of ``epp serve``: upstream's names, types and defaults, and how they become ``ServeOptions``.

Every flag either upstream chart renders is accepted (LDR ``pkg/epp/server/options.go``, its
logging options, and the GIE-only ``--model-server-metrics-*`` flags), and each is honoured.
Flags that only mean something to a Go binary (``--zap-*`` options we cannot map, pprof) are
accepted too and listed by :func:`no_effect_flags`, so start-up logs each once as having no
effect instead of rejecting a chart's argument list. Our own additions (``--bind-address``,
``--kubeconfig``, ``--max-request-body-bytes``, a repeatable ``--pool-name``,
``--enable-conformance-test-hooks``) keep upstream behaviour when left at their defaults.
``--epp-api`` adds the ``epp.v1`` services beside health on the health port (or, with
``--metrics-cert-dir``, on their own TLS port, ``--epp-api-port``). Two choose between the two
upstreams where they differ: ``--ha-lease-name-style`` (GIE's Lease name by default) and
``--metrics-naming`` (both names by default, as the llm-d router emits them).

Flag values are read the Go way (``config/go_flags.py``, which also holds the logging flags
``epp sidecar`` shares).
"""

from __future__ import annotations

import argparse
import os

from epp import quantities
from epp.config.go_flags import add_logging_flags, flag, logging_options_from_args, switch, unquote
from epp.config.options import (
    LEASE_NAME_STYLES,
    METRICS_NAMINGS,
    MIN_REFRESH_METRICS_INTERVAL,
    V1_GROUP,
    MetricsEndpointOptions,
    ModelServerMetricsOptions,
    OptionsError,
    ServeOptions,
    TlsOptions,
    parse_duration_flag,
    parse_ports,
)
from epp.framework.replication import SyncSettings
from epp.statesync.address import redis_url

__all__ = [
    "add_serve_flags",
    "no_effect_flags",
    "options_from_args",
    "parse_quantity",
]


def parse_quantity(text: str, *, flag: str) -> int:
    """A Kubernetes quantity of bytes (``10Mi``, ``25M``; a trailing ``B`` as in ``10MiB`` is dropped)."""
    try:
        return quantities.parse_quantity(text)
    except ValueError:
        raise OptionsError(f"--{flag}: invalid size {text!r} (use e.g. 4Mi, 10MiB, 25MB)") from None


def add_serve_flags(p: argparse.ArgumentParser) -> None:
    """Register every ``epp serve`` flag on ``p``."""
    pool = p.add_argument_group("pool")
    pool.add_argument(
        "--pool-name",
        action="append",
        default=[],
        help="InferencePool to serve; repeat to serve several pools from one picker "
        "(requests name theirs with the x-gateway-inference-pool header)",
    )
    flag(pool, "--pool-namespace", default="", help="namespace of the pool (default: $NAMESPACE, else default)")
    flag(
        pool,
        "--pool-group",
        default=V1_GROUP,
        help="API group of the pool; inference.networking.x-k8s.io selects the v1alpha2 InferencePool",
    )
    flag(pool, "--endpoint-selector", default="", help="standalone mode: pod label selector (no InferencePool)")
    flag(pool, "--endpoint-target-ports", default="", help="standalone mode: comma-separated target ports (1-8)")
    switch(pool, "--disable-endpoint-subset-filter", False, "ignore the gateway's destination-endpoint subset hint")

    serving = p.add_argument_group("ext_proc serving")
    flag(serving, "--bind-address", default="0.0.0.0", help="address every server listens on")
    flag(serving, "--grpc-port", type=int, default=9002, help="ext_proc gRPC port")
    flag(serving, "--grpc-health-port", type=int, default=9003, help="gRPC health port (liveness, readiness)")
    switch(serving, "--health-checking", False, "also serve gRPC health on the ext_proc port (gateway health checks)")
    flag(
        serving,
        "--workers",
        type=int,
        default=1,
        help="serving processes sharing the ext_proc port (SO_REUSEPORT): this one and N-1 children fed its "
        "scrapes (implies --metrics-scrape-process) and sharing routing state through it; the kernel spreads "
        'connections, not streams (docs/deploy.md, "Several cores")',
    )
    flag(
        serving,
        "--grpc-max-recv-msg-size",
        default="",
        help="largest message the ext_proc port accepts, e.g. 10MiB (unset: 32MiB; 0: gRPC's 4MiB)",
    )
    flag(
        serving,
        "--grpc-max-send-msg-size",
        default="",
        help="largest message the ext_proc port sends, e.g. 10MiB (unset: 32MiB; 0: gRPC's no limit)",
    )
    flag(
        serving,
        "--max-request-body-bytes",
        type=int,
        default=16 * 1024 * 1024,
        help="larger request bodies get 413",
    )
    flag(
        serving,
        "--drain-timeout",
        default="30s",
        help="on SIGTERM: NOT_SERVING at once, ext_proc keeps serving this long, then open streams get up to 90s",
    )
    switch(
        serving,
        "--emit-endpoint-scores",
        False,
        "each scored endpoint's weighted score in the envoy.lb metadata (x-gateway-destination-endpoint-scores)",
    )
    switch(
        serving,
        "--enable-grpc-stream-metrics",
        False,
        "llm_d_epp_extproc_* series: ext_proc streams open, their duration, how they ended (gRPC code)",
    )
    switch(
        serving,
        "--enable-conformance-test-hooks",
        False,
        "for the GIE conformance suite only: the test-epp-endpoint-selection request header picks the "
        "endpoints (round-robin), x-conformance-test-served-endpoint echoes the served endpoint",
    )

    tls = p.add_argument_group("TLS")
    switch(tls, "--secure-serving", True, "TLS on the ext_proc port")
    flag(tls, "--cert-path", default="", help="directory with tls.crt and tls.key (else a self-signed certificate)")
    switch(tls, "--enable-cert-reload", False, "reload --cert-path when its files change")
    flag(tls, "--tls-min-version", default="", help="minimum TLS version: VersionTLS12 (others are refused)")
    flag(tls, "--tls-cipher-suites", default="", help="comma-separated TLS 1.2 cipher suites (Go names)")

    config = p.add_argument_group("configuration")
    flag(config, "--config-file", default="", help="EndpointPickerConfig file (watched and reloaded)")
    flag(config, "--config-text", default="", help="EndpointPickerConfig as text")
    switch(
        config,
        "--allow-experimental-plugins",
        False,
        "allow plugin types upstream marks experimental (Alpha; docs/scheduling.md marks each)",
    )
    config.add_argument(
        "--list-plugins",
        action="store_true",
        help="print every plugin type (in-tree, and those of installed distributions: the epp.plugins entry "
        "points, each imported to say whether it loads) with where it comes from, then exit",
    )
    switch(config, "--ha-enable-leader-election", False, "several replicas: only the Lease holder reports ready")
    flag(
        config,
        "--ha-lease-name-style",
        choices=LEASE_NAME_STYLES,
        default="gie",
        help="the Lease leader election holds: gie, epp-<ns>-<pool>.gateway-api-inference-extension.sigs.k8s.io "
        "(the GIE picker's, and ours so far: one lease across our rolling updates); llm-d, "
        "epp-<ns>-<pool>.llm-d.ai (the llm-d router's: pick it to share one lease with llm-d pickers)",
    )
    flag(
        config,
        "--state-sync-address",
        default="",
        help="Valkey/Redis server the pool's replicas share state through (redis://, rediss://, valkey://, "
        "valkeys://, unix:// or host:port): approximate-prefix insertions and in-flight counts (docs/deploy.md)",
    )
    flag(
        config,
        "--state-sync-interval",
        default="200ms",
        help="how often each replica sends its in-flight counts when they changed (and every 5th when not)",
    )
    flag(config, "--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")

    scraping = p.add_argument_group("model-server metrics")
    flag(scraping, "--refresh-metrics-interval", default="50ms", help="model-server /metrics scrape interval")
    switch(
        scraping,
        "--metrics-scrape-process",
        False,
        "scrape from a child process that sends the picker batched snapshots, so hundreds of model servers "
        "cost the serving loop nothing (docs/benchmarks.md, epp bench scale)",
    )
    flag(
        scraping, "--refresh-prometheus-metrics-interval", default="5s", help="interval of the inference_pool_* gauges"
    )
    flag(
        scraping,
        "--metrics-staleness-threshold",
        default="2s",
        help="metrics older than this are stale: left out of inference_pool_ready_pods and the pool averages, "
        "and routed to only when no healthy endpoint is fresh; admission uses the utilization-detector's own "
        "metricsStalenessThreshold (200ms)",
    )
    flag(
        scraping,
        "--model-server-metrics-scheme",
        default="http",
        help="http or https, kept alive per endpoint (GIE)",
    )
    flag(scraping, "--model-server-metrics-path", default="/metrics", help="path of the model servers' metrics (GIE)")
    flag(
        scraping,
        "--model-server-metrics-port",
        type=int,
        default=0,
        help="port of the metrics; 0: the target port; used for single-port pools only (GIE)",
    )
    switch(
        scraping,
        "--model-server-metrics-https-insecure-skip-verify",
        True,
        "with https, do not verify the model server's certificate; false: it must chain to the system CAs "
        "and name the pod's IP (GIE)",
    )
    for name, what in (
        ("total-queued-requests-metric", "waiting requests"),
        ("total-running-requests-metric", "running requests"),
        ("kv-cache-usage-percentage-metric", "KV-cache use (0-1)"),
        ("lora-info-metric", "LoRA adapters (vLLM's labels)"),
        ("cache-info-metric", "the KV block size and count (labels)"),
    ):
        flag(
            scraping,
            f"--{name}",
            default=None,
            help=(
                f"name or name{{label=value,...}} of the metric for {what}, for every built-in engine "
                "the config does not define; empty: not read (GIE)"
            ),
        )

    diag = p.add_argument_group("diagnostics")
    flag(diag, "--metrics-port", type=int, default=9090, help="Prometheus /metrics port")
    flag(
        diag,
        "--metrics-naming",
        choices=METRICS_NAMINGS,
        default="both",
        help="names of upstream's series: gie (inference_objective_*, inference_pool_*, inference_extension_*), "
        "llm-d (llm_d_epp_*), or both, each GIE series beside its llm_d_epp_* twin, as the llm-d router "
        "emits them; both is the default because GIE's dashboard reads the inference_* names and the llm-d "
        "dashboards read llm_d_epp_*",
    )
    switch(diag, "--metrics-endpoint-auth", True, "/metrics needs a bearer token allowed by TokenReview and RBAC")
    flag(diag, "--metrics-cert-dir", default="", help="directory with tls.crt and tls.key: HTTPS on /metrics")
    flag(diag, "--metrics-client-ca-file", default="", help="PEM CA: /metrics requires verified client certificates")
    switch(diag, "--enable-pprof", True, "Go pprof handlers (no effect here: /debug/pprof answers 404)")
    switch(
        diag,
        "--epp-api",
        True,
        "the epp.v1 gRPC API (Endpoints, Explain, Config) with /metrics' authentication: on the health port, "
        "or with --metrics-cert-dir on --epp-api-port behind the same TLS (the health port stays plaintext)",
    )
    flag(
        diag,
        "--epp-api-port",
        type=int,
        default=9004,
        help="the epp.v1 API's own gRPC port, used with --metrics-cert-dir (its certificate and client CA)",
    )
    switch(diag, "--tracing", True, "OpenTelemetry traces (exported when an OTLP endpoint is configured)")
    add_logging_flags(diag)


def _metric(flag: str, value: str | None) -> str | None:
    """A metric-name flag's spec, unquoted; one that does not parse is an error naming the flag."""
    if value is None:
        return None
    spec = unquote(value)
    if spec:
        # Here, not at the top: the data layer (aiohttp and all) is not needed to parse flags, and
        # options.py must not import it (import-linter: scheduling and kube import the options).
        from epp.datalayer.promtext import SelectorError, parse_selector

        try:
            parse_selector(spec)
        except SelectorError as e:
            raise OptionsError(f"--{flag}: {e}") from e
    return spec


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """Build and validate the options; raises OptionsError naming the flag."""
    return ServeOptions(
        pool_names=tuple(args.pool_name),
        pool_namespace=args.pool_namespace,
        pool_group=args.pool_group,
        endpoint_selector=args.endpoint_selector,
        endpoint_target_ports=parse_ports(args.endpoint_target_ports) if args.endpoint_target_ports else (),
        bind_address=args.bind_address,
        grpc_port=args.grpc_port,
        grpc_health_port=args.grpc_health_port,
        grpc_max_recv_msg_size=(
            parse_quantity(args.grpc_max_recv_msg_size, flag="grpc-max-recv-msg-size")
            if args.grpc_max_recv_msg_size
            else None
        ),
        grpc_max_send_msg_size=(
            parse_quantity(args.grpc_max_send_msg_size, flag="grpc-max-send-msg-size")
            if args.grpc_max_send_msg_size
            else None
        ),
        health_checking=args.health_checking,
        drain_timeout=parse_duration_flag(args.drain_timeout, flag="drain-timeout"),
        config_file=args.config_file,
        config_text=args.config_text,
        allow_experimental_plugins=args.allow_experimental_plugins,
        refresh_metrics_interval=parse_duration_flag(args.refresh_metrics_interval, flag="refresh-metrics-interval"),
        metrics_scrape_process=args.metrics_scrape_process or args.workers > 1,
        workers=args.workers,
        refresh_prometheus_metrics_interval=parse_duration_flag(
            args.refresh_prometheus_metrics_interval, flag="refresh-prometheus-metrics-interval"
        ),
        metrics_staleness_threshold=parse_duration_flag(
            args.metrics_staleness_threshold, flag="metrics-staleness-threshold"
        ),
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG", ""),
        max_request_body_bytes=args.max_request_body_bytes,
        disable_endpoint_subset_filter=args.disable_endpoint_subset_filter,
        emit_endpoint_scores=args.emit_endpoint_scores,
        enable_grpc_stream_metrics=args.enable_grpc_stream_metrics,
        conformance_test_hooks=args.enable_conformance_test_hooks,
        leader_election=args.ha_enable_leader_election,
        state_sync=_state_sync(args),
        lease_name_style=args.ha_lease_name_style,
        metrics_naming=args.metrics_naming,
        tracing=args.tracing,
        epp_api=args.epp_api,
        epp_api_port=args.epp_api_port,
        logging=logging_options_from_args(args),
        tls=TlsOptions(
            secure_serving=args.secure_serving,
            cert_path=args.cert_path,
            cert_reload=args.enable_cert_reload,
            min_version=unquote(args.tls_min_version),
            cipher_suites=tuple(s.strip() for s in unquote(args.tls_cipher_suites).split(",") if s.strip()),
        ),
        metrics_endpoint=MetricsEndpointOptions(
            port=args.metrics_port,
            auth=args.metrics_endpoint_auth,
            cert_dir=args.metrics_cert_dir,
            client_ca_file=args.metrics_client_ca_file,
            pprof=args.enable_pprof,
        ),
        model_server_metrics=ModelServerMetricsOptions(
            scheme=unquote(args.model_server_metrics_scheme),  # type: ignore[arg-type]  # checked there
            path=unquote(args.model_server_metrics_path),
            port=args.model_server_metrics_port or None,
            https_insecure_skip_verify=args.model_server_metrics_https_insecure_skip_verify,
            queued_requests_metric=_metric("total-queued-requests-metric", args.total_queued_requests_metric),
            running_requests_metric=_metric("total-running-requests-metric", args.total_running_requests_metric),
            kv_cache_usage_metric=_metric("kv-cache-usage-percentage-metric", args.kv_cache_usage_percentage_metric),
            lora_info_metric=_metric("lora-info-metric", args.lora_info_metric),
            cache_info_metric=_metric("cache-info-metric", args.cache_info_metric),
        ),
    )


def _state_sync(args: argparse.Namespace) -> SyncSettings | None:
    interval = parse_duration_flag(args.state_sync_interval, flag="state-sync-interval")
    if interval <= 0:
        raise OptionsError(f"--state-sync-interval must be > 0, got {args.state_sync_interval!r}")
    if not args.state_sync_address:
        return None
    try:
        redis_url(args.state_sync_address)
        return SyncSettings(args.state_sync_address, in_flight_interval=interval)
    except ValueError as e:
        raise OptionsError(f"--state-sync-address: {e}") from e


def no_effect_flags(options: ServeOptions) -> list[str]:
    """Flags given that mean something only to upstream's Go binary, each with why it has no effect here."""
    notes: list[str] = []
    logging = options.logging
    if not logging.zap_devel:
        notes.append("--zap-devel=false: development mode only picks zap's default encoder; --zap-encoder decides")
    if logging.zap_stacktrace_level:
        notes.append("--zap-stacktrace-level: Python logs carry a traceback on every logged exception")
    if logging.zap_time_encoding:
        notes.append("--zap-time-encoding: timestamps are always RFC 3339 in UTC with milliseconds")
    if options.metrics_endpoint.pprof:
        notes.append("--enable-pprof: Go's pprof handlers do not exist here; /debug/pprof/* answers 404")
    if options.refresh_metrics_interval < MIN_REFRESH_METRICS_INTERVAL:
        notes.append(
            f"--refresh-metrics-interval below upstream's {MIN_REFRESH_METRICS_INTERVAL * 1000:.0f}ms floor "
            "is honoured as given (upstream would clamp it)"
        )
    return notes
