"""``epp serve``: upstream flag names and defaults → :class:`ServeOptions` → the runtime until a signal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from typing import Any

from epp.config.options import OptionsError, ServeOptions, parse_duration_flag, parse_ports

__all__ = ["add_parser", "options_from_args"]

log = logging.getLogger(__name__)

_DEPRECATED_METRIC_FLAGS = (
    "total-queued-requests-metric",
    "total-running-requests-metric",
    "kv-cache-usage-percentage-metric",
    "lora-info-metric",
    "cache-info-metric",
)


def _bool(text: str) -> bool:
    """Go's strconv.ParseBool, so ``--secure-serving=false`` works as upstream."""
    value = text.strip().lower()
    if value in ("1", "t", "true", "yes", "on"):
        return True
    if value in ("0", "f", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"invalid boolean {text!r}")


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the endpoint picker (Envoy ext_proc server)",
        description="Run the endpoint picker: an Envoy ext_proc gRPC server that picks the model-server "
        "endpoint for each request. Flag names and defaults follow the upstream GIE picker.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    pool = p.add_argument_group("pool")
    pool.add_argument(
        "--pool-name",
        action="append",
        default=[],
        help="InferencePool to serve; repeat to serve several pools from one picker "
        "(requests name theirs with the x-gateway-inference-pool header)",
    )
    pool.add_argument("--pool-namespace", default="", help="namespace of the pool (default: $NAMESPACE or default)")
    pool.add_argument(
        "--pool-group",
        default="inference.networking.k8s.io",
        help="API group of the pool; inference.networking.x-k8s.io selects the v1alpha2 InferencePool",
    )
    pool.add_argument("--endpoint-selector", default="", help="standalone mode: pod label selector k=v,... (no CRDs)")
    pool.add_argument("--endpoint-target-ports", default="", help="standalone mode: comma-separated target ports")
    pool.add_argument(
        "--disable-endpoint-subset-filter",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        help="ignore Envoy's subset hint",
    )
    net = p.add_argument_group("serving")
    net.add_argument("--bind-address", default="0.0.0.0", help="address every server listens on")
    net.add_argument("--grpc-port", type=int, default=9002, help="ext_proc gRPC port")
    net.add_argument("--grpc-health-port", type=int, default=9003, help="gRPC health port")
    net.add_argument("--metrics-port", type=int, default=9090, help="Prometheus /metrics port")
    net.add_argument(
        "--secure-serving", type=_bool, nargs="?", const=True, default=True, help="TLS on the ext_proc port"
    )
    net.add_argument("--cert-path", default="", help="directory with tls.crt and tls.key (else self-signed)")
    net.add_argument(
        "--max-request-body-bytes", type=int, default=16 * 1024 * 1024, help="larger request bodies get 413"
    )
    cfg = p.add_argument_group("configuration")
    cfg.add_argument("--config-file", default="", help="EndpointPickerConfig file (watched and reloaded)")
    cfg.add_argument("--config-text", default="", help="EndpointPickerConfig as text")
    cfg.add_argument("--refresh-metrics-interval", default="50ms", help="model-server /metrics scrape interval")
    cfg.add_argument(
        "--refresh-prometheus-metrics-interval", default="5s", help="interval of the inference_pool_* gauges"
    )
    cfg.add_argument("--metrics-staleness-threshold", default="2s", help="metrics older than this are stale")
    cfg.add_argument(
        "--ha-enable-leader-election",
        type=_bool,
        nargs="?",
        const=True,
        default=False,
        help="several replicas: only the holder of the pool's Lease reports ready",
    )
    cfg.add_argument("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    cfg.add_argument("-v", "--v", dest="verbosity", type=int, default=2, help="log verbosity (2 info, 4 debug)")
    cfg.add_argument("--log-json", action="store_true", help="log JSON lines instead of key=value")
    for name in _DEPRECATED_METRIC_FLAGS:
        cfg.add_argument(f"--{name}", default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=run)
    return p


def options_from_args(args: argparse.Namespace) -> ServeOptions:
    """Build and validate the options; raises OptionsError naming the flag."""
    for name in _DEPRECATED_METRIC_FLAGS:
        if getattr(args, name.replace("-", "_")) is not None:
            raise OptionsError(
                f"--{name} is no longer supported; configure engine metric names in the config file instead"
            )
    return ServeOptions(
        pool_names=tuple(args.pool_name),
        pool_namespace=args.pool_namespace,
        pool_group=args.pool_group,
        endpoint_selector=args.endpoint_selector,
        endpoint_target_ports=parse_ports(args.endpoint_target_ports) if args.endpoint_target_ports else (),
        bind_address=args.bind_address,
        grpc_port=args.grpc_port,
        grpc_health_port=args.grpc_health_port,
        metrics_port=args.metrics_port,
        secure_serving=args.secure_serving,
        cert_path=args.cert_path,
        config_file=args.config_file,
        config_text=args.config_text,
        refresh_metrics_interval=parse_duration_flag(args.refresh_metrics_interval, flag="refresh-metrics-interval"),
        refresh_prometheus_metrics_interval=parse_duration_flag(
            args.refresh_prometheus_metrics_interval, flag="refresh-prometheus-metrics-interval"
        ),
        metrics_staleness_threshold=parse_duration_flag(
            args.metrics_staleness_threshold, flag="metrics-staleness-threshold"
        ),
        kubeconfig=args.kubeconfig or os.environ.get("KUBECONFIG", ""),
        verbosity=args.verbosity,
        max_request_body_bytes=args.max_request_body_bytes,
        disable_endpoint_subset_filter=args.disable_endpoint_subset_filter,
        leader_election=args.ha_enable_leader_election,
    )


async def _serve(options: ServeOptions) -> None:
    from epp.runtime import Runtime  # the heavy imports only when actually serving

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    runtime = Runtime(options)
    try:
        await runtime.start()
        await stop.wait()
        log.info("signal received, shutting down")
    finally:
        await runtime.stop()


def run(args: argparse.Namespace) -> int:
    from epp.telemetry.logs import setup_logging

    try:
        options = options_from_args(args)
    except OptionsError as e:
        print(f"epp serve: {e}", file=sys.stderr)
        return 2
    setup_logging(options.verbosity, json_format=args.log_json)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    try:
        asyncio.run(_serve(options))
    except Exception as e:  # start-up failures: say what failed, exit non-zero, no traceback spam
        log.error("epp serve failed: %s", e, exc_info=options.verbosity >= 4)
        return 1
    return 0
