"""``epp autoscale``: flags → :class:`ControllerOptions`; builds the kr8s Api, the metrics source,
the ``/metrics`` server and the controller, runs the loop and tears it all down in order.

Flag defaults follow upstream WVA where it has one, including its environment variables
(``GLOBAL_OPT_INTERVAL`` 15 s, ``POD_NAMESPACE``, ``SATURATION_CONFIG_MAP_NAME``,
``WVA_SCALE_TO_ZERO``, ``CONTROLLER_INSTANCE``, ``WATCH_NAMESPACE``, ``PROMETHEUS_BASE_URL`` and the
Prometheus TLS and token settings of :mod:`epp.autoscale.prometheus_access`). ``WVA_LIMITED_MODE=true``
is refused: it turns on GPU inventory discovery from Nodes, which this autoscaler does not do
(declare a quota limiter instead).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable

from epp.autoscale.controller import DEFAULT_CONFIG_NAMESPACE, DEFAULT_INTERVAL, Controller, ControllerOptions
from epp.autoscale.inputs import MetricsSource
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.peak import PeakSource
from epp.autoscale.prometheus import PrometheusSource
from epp.autoscale.prometheus_access import PrometheusAccess, PrometheusAccessError
from epp.autoscale.resources import KubeCluster
from epp.autoscale.saturation_config import SATURATION_CONFIGMAP
from epp.autoscale.scrape import ScrapeSource
from epp.autoscale.wake import PickerReader
from epp.clock import SystemClock
from epp.config.options import MetricsEndpointOptions, OptionsError
from epp.datalayer.http_client import create_session
from epp.durations import parse_duration
from epp.kube.client import KubeError, close_api, make_api
from epp.kube.reviews import KubeReviewer
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.metrics_auth import MetricsAuth
from epp.telemetry.metrics_server import MetricsServer, MetricsTlsError

__all__ = ["add_parser", "run"]

log = logging.getLogger(__name__)


def _duration(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            return parse_duration(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{flag}: invalid duration {text!r} (use e.g. 30s, 10m)") from None

    return parse


def _env_bool(name: str) -> bool:
    """A boolean environment variable as upstream's config loader reads one (Go's ``ParseBool``; else false)."""
    return os.environ.get(name, "") in ("1", "t", "T", "true", "TRUE", "True")


def _interval_from_env() -> float:
    """Upstream's ``GLOBAL_OPT_INTERVAL``: a duration of at least 1s, else (logged) 15s."""
    text = os.environ.get("GLOBAL_OPT_INTERVAL", "")
    if not text:
        return DEFAULT_INTERVAL
    try:
        value = parse_duration(text)
    except ValueError:
        value = 0.0
    if value < 1 or text.strip().replace(".", "").isdigit():
        log.warning("GLOBAL_OPT_INTERVAL needs a duration unit and >= 1s; using 15s", extra={"value": text})
        return DEFAULT_INTERVAL
    return value


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``epp autoscale`` and its flags."""
    p = subparsers.add_parser(
        "autoscale",
        help="saturation autoscaler (WVA v0.9) for annotated HPAs, KEDA ScaledObjects and VariantAutoscalings",
        description="Discover variants from HPAs and ScaledObjects annotated llm-d.ai/managed (or VariantAutoscaling "
        "objects), decide replicas from saturation (V2 analyzer by default, V1 selectable), publish wva_* series, "
        "Events and status, and optionally scale workloads directly.",
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig path (default: KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument(
        "--watch-namespace",
        default=os.environ.get("WATCH_NAMESPACE", ""),
        help="only variants declared in this namespace (env WATCH_NAMESPACE; default: all)",
    )
    p.add_argument(
        "--config-namespace",
        default=os.environ.get("POD_NAMESPACE", DEFAULT_CONFIG_NAMESPACE),
        help="namespace of the global ConfigMaps (env POD_NAMESPACE)",
    )
    p.add_argument(
        "--saturation-configmap",
        default=os.environ.get("SATURATION_CONFIG_MAP_NAME", SATURATION_CONFIGMAP),
        help="name of the saturation ConfigMap (env SATURATION_CONFIG_MAP_NAME)",
    )
    p.add_argument(
        "--controller-instance",
        default=os.environ.get("CONTROLLER_INSTANCE", ""),
        help="only HPAs, ScaledObjects and VAs labelled wva.llmd.ai/controller-instance=<id>; adds a "
        "controller_instance label to every series (env CONTROLLER_INSTANCE)",
    )
    p.add_argument(
        "--interval",
        type=_duration("interval"),
        default=None,
        help="cycle period (env GLOBAL_OPT_INTERVAL; default 15s)",
    )
    p.add_argument(
        "--pending-timeout",
        type=_duration("pending-timeout"),
        default=600.0,
        help="a replica not Ready after this long stops counting as capacity on the way (V2) or blocking scale-up "
        "(V1) (default 10m)",
    )
    p.add_argument(
        "--actuate",
        action="store_true",
        help="also scale workloads directly via the scale subresource (leave off when an HPA or KEDA actuates)",
    )
    p.add_argument(
        "--scale-to-zero",
        action="store_true",
        default=os.environ.get("WVA_SCALE_TO_ZERO", "").lower() == "true",
        help="enable scale-to-zero unless the ConfigMap says otherwise (env WVA_SCALE_TO_ZERO)",
    )
    p.add_argument(
        "--epp-metrics-url",
        action="append",
        default=[],
        help="a picker's /metrics: a variant at zero replicas is scaled to 1 while the picker queues requests "
        "for its model (flow control's queue_size; WVA's scale-from-zero); repeat for several pickers",
    )
    p.add_argument(
        "--prometheus-url",
        default=os.environ.get("PROMETHEUS_BASE_URL", ""),
        help="read load with upstream PromQL instead of scraping pods (env PROMETHEUS_BASE_URL)",
    )
    env = os.environ.get
    p.add_argument(
        "--prometheus-ca-cert",
        default=env("PROMETHEUS_CA_CERT_PATH", ""),
        help="https: CA bundle for Prometheus's certificate (env PROMETHEUS_CA_CERT_PATH; default: system CAs)",
    )
    p.add_argument(
        "--prometheus-client-cert",
        default=env("PROMETHEUS_CLIENT_CERT_PATH", ""),
        help="https: client certificate for mTLS (env PROMETHEUS_CLIENT_CERT_PATH)",
    )
    p.add_argument(
        "--prometheus-client-key",
        default=env("PROMETHEUS_CLIENT_KEY_PATH", ""),
        help="https: its key (env PROMETHEUS_CLIENT_KEY_PATH)",
    )
    p.add_argument(
        "--prometheus-insecure-skip-verify",
        action="store_true",
        default=_env_bool("PROMETHEUS_TLS_INSECURE_SKIP_VERIFY"),
        help="https: do not check Prometheus's certificate (env PROMETHEUS_TLS_INSECURE_SKIP_VERIFY)",
    )
    p.add_argument(
        "--prometheus-server-name",
        default=env("PROMETHEUS_SERVER_NAME", ""),
        help="https: the name Prometheus's certificate must carry, if not the URL's host (env PROMETHEUS_SERVER_NAME)",
    )
    p.add_argument(
        "--prometheus-token-file",
        default=env("PROMETHEUS_TOKEN_PATH", ""),
        help="https: file holding the bearer token, re-read every minute (env PROMETHEUS_TOKEN_PATH; "
        "PROMETHEUS_BEARER_TOKEN gives the token itself and wins)",
    )
    p.add_argument("--scrape-port", type=int, default=8000, help="pod metrics port when the pod declares none")
    p.add_argument(
        "--peak-window",
        type=float,
        default=60.0,
        help="when scraping pods, use each pod's peak KV use and queue over this many seconds of cycles "
        "(upstream's max_over_time[1m]); 0 = one sample per cycle",
    )
    p.add_argument("--scrape-timeout", type=_duration("scrape-timeout"), default=2.0, help="per-pod scrape deadline")
    p.add_argument("--metrics-port", type=int, default=8080, help="port for /metrics (wva_* gauges)")
    p.add_argument(
        "--metrics-endpoint-auth",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="/metrics needs a bearer token allowed by TokenReview and RBAC (as the picker's flag; default off)",
    )
    p.add_argument("--metrics-cert-dir", default="", help="directory with tls.crt and tls.key: HTTPS on /metrics")
    p.add_argument(
        "--metrics-client-ca-file", default="", help="PEM CA: /metrics requires verified client certificates"
    )
    p.add_argument("--once", action="store_true", help="run one cycle, print the decisions and exit")
    p.set_defaults(func=_command)


def _prometheus_access(args: argparse.Namespace) -> PrometheusAccess | None:
    """How to reach ``--prometheus-url`` (reads the certificate and token files); None without one."""
    tls = {
        "--prometheus-ca-cert": args.prometheus_ca_cert,
        "--prometheus-client-cert": args.prometheus_client_cert,
        "--prometheus-client-key": args.prometheus_client_key,
        "--prometheus-insecure-skip-verify": args.prometheus_insecure_skip_verify,
        "--prometheus-server-name": args.prometheus_server_name,
        "--prometheus-token-file": args.prometheus_token_file,
        "PROMETHEUS_BEARER_TOKEN": os.environ.get("PROMETHEUS_BEARER_TOKEN", ""),
    }
    if not args.prometheus_url:
        given = [name for name, value in tls.items() if value]
        if given:
            raise PrometheusAccessError(f"{', '.join(given)}: only with --prometheus-url (PROMETHEUS_BASE_URL)")
        return None
    return PrometheusAccess.build(
        args.prometheus_url,
        ca_cert=args.prometheus_ca_cert,
        client_cert=args.prometheus_client_cert,
        client_key=args.prometheus_client_key,
        insecure_skip_verify=args.prometheus_insecure_skip_verify,
        server_name=args.prometheus_server_name,
        token=tls["PROMETHEUS_BEARER_TOKEN"],
        token_path=args.prometheus_token_file,
    )


def _command(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))


async def run(args: argparse.Namespace, *, stop: asyncio.Event | None = None) -> int:
    """Run ``epp autoscale`` until SIGTERM/SIGINT (or ``stop`` is set); ``--once``: one cycle.

    Returns the exit code: 0 done, 1 the API server or credentials failed, 2 bad flags.
    """
    if os.environ.get("WVA_LIMITED_MODE", "").lower() == "true":
        print(
            "epp autoscale: WVA_LIMITED_MODE=true: GPU inventory discovery from Nodes is not supported; "
            "declare a quota limiter in the saturation ConfigMap instead",
            file=sys.stderr,
        )
        return 2
    try:
        options = ControllerOptions(
            interval=args.interval if args.interval is not None else _interval_from_env(),
            pending_timeout=args.pending_timeout,
            actuate=args.actuate,
            config_namespace=args.config_namespace,
            saturation_configmap=args.saturation_configmap,
            scale_to_zero=args.scale_to_zero,
            scrape_port=args.scrape_port,
            watch_namespace=args.watch_namespace,
            controller_instance=args.controller_instance,
        )
    except ValueError as e:
        print(f"epp autoscale: {e}", file=sys.stderr)
        return 2
    try:
        access = await asyncio.to_thread(_prometheus_access, args)
        endpoint = MetricsEndpointOptions(
            port=args.metrics_port,
            auth=args.metrics_endpoint_auth,
            cert_dir=args.metrics_cert_dir,
            client_ca_file=args.metrics_client_ca_file,
            pprof=False,
        )
    except (PrometheusAccessError, OptionsError) as e:
        print(f"epp autoscale: {e}", file=sys.stderr)
        return 2
    try:
        api = await make_api(args.kubeconfig or None)
    except KubeError as e:
        print(f"epp autoscale: {e}", file=sys.stderr)
        return 1
    session = create_session()
    metrics = AutoscalerMetrics(controller_instance=args.controller_instance)
    clock = SystemClock()
    server = MetricsServer(
        metrics,
        auth=MetricsAuth(KubeReviewer(api), clock=clock) if endpoint.auth else None,
        cert_dir=endpoint.cert_dir,
        client_ca_file=endpoint.client_ca_file,
    )
    try:
        source: MetricsSource
        if access is not None:
            source = PrometheusSource(  # upstream PromQL already takes the peak
                session, access, on_unattributed=metrics.unattributed
            )
        else:
            source = ScrapeSource(session, clock, timeout=args.scrape_timeout)
            if args.peak_window > 0:
                source = PeakSource(source, clock, window=args.peak_window)
        cluster = KubeCluster(api, watch_namespace=args.watch_namespace)
        picker = (
            PickerReader(session, args.epp_metrics_url, clock, timeout=args.scrape_timeout)
            if args.epp_metrics_url
            else None
        )
        controller = Controller(cluster, source, clock=clock, metrics=metrics, options=options, picker=picker)
        if args.once:
            try:
                outcomes = await controller.run_cycle()
            except KubeError as e:
                print(f"epp autoscale: {e}", file=sys.stderr)
                return 1
            for key, outcome in sorted(outcomes.items()):
                d = outcome.decision
                detail = f"{d.current} -> {d.target} ({d.reason.value}) {d.message}" if d else outcome.error
                print(f"{key}: {detail}")
            return 0
        try:
            await server.start("", endpoint.port)
        except MetricsTlsError as e:
            print(f"epp autoscale: {e}", file=sys.stderr)
            return 2
        stop = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        signals = []
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
                signals.append(sig)
        task = start_guarded(controller.run(), name="autoscaler-loop")
        try:
            await stop.wait()
        finally:
            await cancel_and_wait(task)
            for sig in signals:
                loop.remove_signal_handler(sig)
        return 0
    finally:
        await server.stop()
        await session.close()
        await close_api(api)
