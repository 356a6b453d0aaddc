"""``epp autoscale``: flags → :class:`ControllerOptions`; builds the kr8s Api, the metrics source,
the ``/metrics`` server and the controller, runs the loop and tears it all down in order.

Flag defaults follow upstream WVA where it has one (30 s cycle, ``POD_NAMESPACE``,
``SATURATION_CONFIG_MAP_NAME``, ``WVA_SCALE_TO_ZERO``, ``CONTROLLER_INSTANCE``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Callable

from epp.autoscale.controller import DEFAULT_CONFIG_NAMESPACE, Controller, ControllerOptions
from epp.autoscale.inputs import MetricsSource, PrometheusSource, ScrapeSource
from epp.autoscale.metrics import AutoscalerMetrics
from epp.autoscale.peak import PeakSource
from epp.autoscale.resources import KubeCluster
from epp.autoscale.thresholds import SATURATION_CONFIGMAP
from epp.autoscale.wake import QueueReader
from epp.clock import SystemClock
from epp.datalayer.http_client import create_session
from epp.durations import parse_duration
from epp.kube.client import KubeError, close_api, make_api
from epp.tasks import cancel_and_wait, start_guarded
from epp.telemetry.metrics_server import MetricsServer

__all__ = ["add_parser", "run"]


def _duration(flag: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            return parse_duration(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--{flag}: invalid duration {text!r} (use e.g. 30s, 10m)") from None

    return parse


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``epp autoscale`` and its flags."""
    p = subparsers.add_parser(
        "autoscale",
        help="saturation autoscaler for VariantAutoscaling (llmd.ai/v1alpha1), pending-aware",
        description="Watch VariantAutoscaling objects, decide replicas from KV-cache and queue saturation, "
        "publish wva_* gauges and status, and optionally scale Deployments directly.",
    )
    p.add_argument("--kubeconfig", default="", help="kubeconfig path (default: KUBECONFIG, ~/.kube/config, in-cluster)")
    p.add_argument("--watch-namespace", default="", help="only VariantAutoscalings in this namespace (default: all)")
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
        help="only VAs labelled wva.llmd.ai/controller-instance=<id>; adds a controller_instance label",
    )
    p.add_argument("--interval", type=_duration("interval"), default=30.0, help="cycle period (default 30s)")
    p.add_argument(
        "--pending-timeout",
        type=_duration("pending-timeout"),
        default=600.0,
        help="a replica not Ready after this long stops blocking scale-up (default 10m)",
    )
    p.add_argument("--actuate", action="store_true", help="scale Deployments directly via the scale subresource")
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
    p.add_argument("--prometheus-url", default="", help="read load with upstream PromQL instead of scraping pods")
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
    p.add_argument("--once", action="store_true", help="run one cycle, print the decisions and exit")
    p.set_defaults(func=_command)


def _command(args: argparse.Namespace) -> int:
    return asyncio.run(run(args))


async def run(args: argparse.Namespace, *, stop: asyncio.Event | None = None) -> int:
    """Run ``epp autoscale`` until SIGTERM/SIGINT (or ``stop`` is set); ``--once``: one cycle.

    Returns the exit code: 0 done, 1 the API server or credentials failed, 2 bad flags.
    """
    try:
        options = ControllerOptions(
            interval=args.interval,
            pending_timeout=args.pending_timeout,
            actuate=args.actuate,
            config_namespace=args.config_namespace,
            saturation_configmap=args.saturation_configmap,
            scale_to_zero=args.scale_to_zero,
            scrape_port=args.scrape_port,
        )
    except ValueError as e:
        print(f"epp autoscale: {e}", file=sys.stderr)
        return 2
    try:
        api = await make_api(args.kubeconfig or None)
    except KubeError as e:
        print(f"epp autoscale: {e}", file=sys.stderr)
        return 1
    session = create_session()
    metrics = AutoscalerMetrics(controller_instance=args.controller_instance)
    server = MetricsServer(metrics)
    try:
        clock = SystemClock()
        source: MetricsSource
        if args.prometheus_url:
            source = PrometheusSource(session, args.prometheus_url)  # upstream PromQL already takes the peak
        else:
            source = ScrapeSource(session, clock, timeout=args.scrape_timeout)
            if args.peak_window > 0:
                source = PeakSource(source, clock, window=args.peak_window)
        cluster = KubeCluster(api, watch_namespace=args.watch_namespace, controller_instance=args.controller_instance)
        wake = QueueReader(session, args.epp_metrics_url, timeout=args.scrape_timeout) if args.epp_metrics_url else None
        controller = Controller(cluster, source, clock=clock, metrics=metrics, options=options, wake=wake)
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
        await server.start("", args.metrics_port)
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
