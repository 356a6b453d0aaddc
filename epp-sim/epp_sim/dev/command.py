"""``epp dev``: the local stack on embedded defaults, one command on a fresh checkout.

Starts :class:`~epp_sim.stack.local.LocalStack` (fake API server with the sample pool, simulated pods,
``epp serve``, Envoy), prints where everything is and a ready-to-paste ``curl``, then shows the
live per-pod table until Ctrl-C (or SIGTERM), which stops every child and removes the work
directory. ``--load`` drives the mixed workload of :mod:`epp_sim.dev.load` for ``--duration``
seconds; ``--exit-after-load`` then stops instead of waiting for Ctrl-C. ``--autoscale`` takes the
pool's pods from a simulated Deployment that the saturation autoscaler scales
(:mod:`epp_sim.dev.autoscale`); its decisions are printed as they change. ``--pd`` serves the pool
disaggregated: a third of the pods (at least one) prefill, the others decode behind ``epp sidecar``,
and the picker runs the P/D configuration of ``manifests/overlays/pd``. ``--no-kubernetes``
starts no API server: the picker reads the pods from an endpoints file it watches
(``file-discovery``), the smallest deployment there is. ``--workers N`` runs the picker with that
many serving processes, Envoy putting one stream on each connection to it.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import logging
import shlex
import signal
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from epp.framework.headers import OBJECTIVE
from epp.framework.roles import ROLE_LABEL
from epp.tasks import cancel_and_wait, start_guarded
from epp_sim.dev.autoscale import AutoscaleConfig, DevAutoscaler
from epp_sim.dev.dashboard import Dashboard, PodRow, pod_row
from epp_sim.dev.load import LoadConfig, run_load
from epp_sim.stack.local import DEFAULT_ENVOY_PORT, DEFAULT_MANIFESTS, LocalStack, StackConfig, StackError
from epp_sim.stack.processes import ChildProcessError
from epp_sim.stack.samples import load_pd_config

__all__ = ["add_parser", "banner", "curl_command", "run"]

log = logging.getLogger(__name__)

_PD_SIDECAR = ("--prefill-max-retries=2", "--prefill-retry-backoff=100ms", "--prefill-timeout=30s")
"""``epp dev --pd``'s sidecar flags, as manifests/overlays/pd has them (no SSRF protection: no RBAC here)."""


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows defaults, except ``None`` ones (their help says what they depend on)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default is None:
            return action.help
        return super()._get_help_string(action)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "dev",
        help="run the whole stack locally: fake API server, simulated pods, the picker and Envoy",
        description="Start a fake Kubernetes API server with the sample InferencePool, objectives and "
        "rewrite from manifests/, simulated vLLM pods on 127.0.0.x, the picker (epp serve) and Envoy; "
        "print a curl to try and a live per-pod table. Ctrl-C stops everything.",
        formatter_class=_HelpFormatter,
    )
    p.add_argument(
        "--pods", type=int, default=None, help="simulated model-server pods (default 4; with --autoscale: 1 initially)"
    )
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"Envoy listener port (default: {DEFAULT_ENVOY_PORT} if free, else any free port; 0: any)",
    )
    p.add_argument("--time-scale", type=float, default=1.0, help="simulator speed-up (10 = ten times faster)")
    p.add_argument("--load", action="store_true", help="drive a short mixed workload through Envoy")
    p.add_argument(
        "--duration", type=_positive(float), default=None, help="seconds of --load (default 20; with --autoscale: 60)"
    )
    p.add_argument("--concurrency", type=_positive(int), default=8, help="concurrent requests of --load")
    p.add_argument("--seed", type=int, default=0, help="seed of the --load workload")
    p.add_argument("--exit-after-load", action="store_true", help="stop once --load is done")
    p.add_argument("--no-dashboard", action="store_true", help="do not draw the live per-pod table")
    p.add_argument("--manifests", type=Path, default=DEFAULT_MANIFESTS, help="folder with crds/ and samples/")
    p.add_argument(
        "--pd",
        action="store_true",
        help="disaggregated serving: a third of the pods (at least 1) prefill, the rest decode behind `epp sidecar`; "
        "the picker runs manifests/overlays/pd's configuration (default 3 pods)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="the picker serves from this many processes (epp serve --workers); Envoy then puts one stream on "
        "each connection to it, so the kernel spreads them",
    )
    p.add_argument(
        "--no-kubernetes",
        action="store_true",
        help="no API server at all: the picker reads the pods from an endpoints file it watches (file-discovery)",
    )
    p.add_argument(
        "--autoscale",
        action="store_true",
        help="pods come from a simulated Deployment scaled by the saturation autoscaler (epp autoscale) in-process",
    )
    p.add_argument(
        "--model-load-delay",
        type=_non_negative,
        default=8.0,
        help="--autoscale: seconds a new pod stays Pending while its model loads",
    )
    p.add_argument(
        "--autoscale-interval",
        type=_positive(float),
        default=3.0,
        help="--autoscale: seconds between autoscaler cycles",
    )
    p.add_argument(
        "--autoscale-window",
        type=_non_negative,
        default=15.0,
        help="--autoscale: read each pod's peak load over this many seconds (0: one sample per cycle)",
    )
    p.add_argument("--max-replicas", type=_positive(int), default=4, help="--autoscale: the HPA's maxReplicas")
    p.add_argument(
        "--scale-to-zero",
        action="store_true",
        help="--autoscale: start at 0 replicas (--pods to change), scale an idle pool to zero, and wake it when "
        "the picker queues a request (the picker runs with the flowControl gate)",
    )
    p.set_defaults(func=run)
    return p


def _positive(kind: Callable[[str], float]) -> Callable[[str], float]:
    """An argparse type: a number of ``kind`` above 0 (so a bad --load flag fails before anything starts)."""

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from e
        if not value > 0:
            raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
        return value

    return parse


def _non_negative(text: str) -> float:
    try:
        value = float(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from e
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


class _Notes:
    """Where messages go: straight to ``out`` until the dashboard runs, then above its table."""

    def __init__(self, out: TextIO) -> None:
        self.write: Callable[[str], None] = functools.partial(_write, out)

    def __call__(self, text: str) -> None:
        self.write(text if text.endswith("\n") else text + "\n")


def curl_command(envoy_url: str, model: str, *, headers: dict[str, str] | None = None) -> str:
    """A ready-to-paste chat completion through Envoy."""
    body = json.dumps(
        {"model": model, "messages": [{"role": "user", "content": "Say hello!"}], "max_tokens": 32},
        separators=(",", ":"),
    )
    extra = "".join(f" -H {shlex.quote(f'{k}: {v}')}" for k, v in (headers or {}).items())
    return f"curl -sS {envoy_url}/v1/chat/completions -H 'content-type: application/json'{extra} -d {shlex.quote(body)}"


def _kubectl() -> str:
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.is_file() else "kubectl"


def pd_roles(pods: int) -> tuple[str, ...]:
    """``--pd``: a third of the pods prefill (at least one), the others decode (at least one)."""
    if pods < 2:
        raise ValueError(f"--pd needs at least 2 pods (a prefill and a decode pod), got {pods}")
    prefill = max(1, pods // 3)
    return ("prefill",) * prefill + ("decode",) * (pods - prefill)


def banner(stack: LocalStack, autoscaler: DevAutoscaler | None = None) -> str:
    """What ``epp dev`` prints once everything is up."""
    samples = stack.samples
    pods = ", ".join(f"{p.address} {p.labels[ROLE_LABEL]}" if ROLE_LABEL in p.labels else p.address for p in stack.pods)
    kinds = "pods,inferencepools"
    if autoscaler is None:
        first = f"epp dev: pool {samples.namespace}/{samples.name}, {len(stack.pods)} simulated pods ({pods})"
    else:
        a = autoscaler.config
        first = (
            f"epp dev: pool {samples.namespace}/{samples.name}, pods from Deployment {samples.deployment_name} "
            f"({a.initial_replicas} initial, up to {a.max_replicas}, on {a.hosts[0]}+:{stack.target_port}; "
            f"model load {a.load_delay:g}s)\n"
            f"  autoscaler:     every {a.interval:g}s, pending timeout {a.pending_timeout:g}s, "
            f"HPA {autoscaler.variant} (V2 analyzer)"
        )
        kinds = "pods,deployments,hpa"
    kubernetes = stack.config.kubernetes
    where = (
        [
            f"  kubeconfig:     {stack.kubeconfig}",
            f"                  {_kubectl()} --kubeconfig {stack.kubeconfig} get {kinds}",
        ]
        if kubernetes
        else [f"  endpoints file: {stack.endpoints_path} (no Kubernetes: edit it, the picker follows)"]
    )
    lines = [
        first,
        f"  Envoy:          {stack.envoy_url}",
        f"  picker metrics: {stack.picker.metrics_url}",
        f"  picker API:     {stack.picker.health_target} (epp.v1, plaintext; grpcurl or epp explain)",
        *where,
        f"  logs:           {stack.work_dir} (removed on exit)",
        "",
        "Try:",
        f"  {curl_command(stack.envoy_url, samples.model)}",
    ]
    if stack.pool.sidecar_args is not None:
        lines.insert(
            1,
            "  P/D:            decode pods run `epp sidecar` in front of their simulator; a prompt whose uncached "
            "part\n                  is long enough (nonCachedTokens) is prefilled on a prefill pod first",
        )
    if samples.rewritten_models and kubernetes:  # rewrites are InferenceModelRewrite objects
        headers = {OBJECTIVE: samples.objective_names[-1]} if samples.objective_names else None
        lines.append(f"  {curl_command(stack.envoy_url, samples.rewritten_models[0], headers=headers)}")
        lines.append(
            f"  (the second asks for {samples.rewritten_models[0]!r}, which a rewrite sends to a LoRA adapter)"
        )
    explain = json.dumps({"model": samples.model, "messages": [{"role": "user", "content": "Say hello!"}]})
    lines.append(
        f"  epp explain --target {stack.picker.health_target} --path /v1/chat/completions -d '{explain}'"
        "  (why the picker would route it there)"
    )
    lines += ["", "Ctrl-C stops everything."]
    return "\n".join(lines) + "\n"


async def _dev(args: argparse.Namespace, out: TextIO) -> int:
    notes = _Notes(out)
    autoscaler: DevAutoscaler | None = None
    if args.scale_to_zero and not args.autoscale:
        out.write("epp dev: --scale-to-zero needs --autoscale\n")
        return 2
    if args.no_kubernetes and args.autoscale:
        out.write("epp dev: --autoscale scales a Deployment in the API server, which --no-kubernetes does not run\n")
        return 2
    if args.no_kubernetes and args.pd:
        out.write("epp dev: --pd labels pods with their roles in the API server, which --no-kubernetes does not run\n")
        return 2
    if args.autoscale:
        autoscaler = DevAutoscaler(
            AutoscaleConfig(
                initial_replicas=(0 if args.scale_to_zero else 1) if args.pods is None else args.pods,
                max_replicas=args.max_replicas,
                load_delay=args.model_load_delay,
                interval=args.autoscale_interval,
                window=args.autoscale_window,
                scale_to_zero=args.scale_to_zero,
            ),
            report=notes,
        )
    pods = 0 if autoscaler else (3 if args.pd else 4) if args.pods is None else args.pods
    picker_args: tuple[str, ...] = autoscaler.config.picker_args if autoscaler else ()
    roles: tuple[str, ...] = ()
    if args.pd:
        if autoscaler is not None:
            out.write("epp dev: --pd and --autoscale do not go together\n")
            return 2
        roles = pd_roles(pods)
        picker_args = ("--config-text", await asyncio.to_thread(load_pd_config, args.manifests))
    if args.workers != 1:
        picker_args = (*picker_args, f"--workers={args.workers}")
    config = StackConfig(
        pods=pods,
        envoy_port=args.port,
        time_scale=args.time_scale,
        manifests=args.manifests,
        picker_args=picker_args,
        roles=roles,
        sidecar_args=_PD_SIDECAR if args.pd else None,
        kubernetes=not args.no_kubernetes,
        envoy_streams_per_connection=1 if args.workers > 1 else None,
    )
    main = asyncio.current_task()
    assert main is not None
    loop = asyncio.get_running_loop()
    stopping = False

    def on_signal() -> None:
        # The first signal cancels start-up or the wait; later ones must not interrupt the teardown.
        nonlocal stopping
        if not stopping:
            stopping = True
            out.write("\nstopping…\n")
            main.cancel()

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    try:
        async with LocalStack(config, components=[autoscaler] if autoscaler else []) as stack:
            out.write(banner(stack, autoscaler))
            out.flush()
            return await _run(stack, autoscaler, args, out, notes)
    except asyncio.CancelledError:
        if not stopping:
            raise
        out.write("stopped\n")
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _run(
    stack: LocalStack, autoscaler: DevAutoscaler | None, args: argparse.Namespace, out: TextIO, say: _Notes
) -> int:
    """Dashboard and load while the stack runs; return when the load is done (if asked) or never."""
    tasks: list[asyncio.Task[Any]] = []

    def hand_made() -> list[PodRow]:
        return [pod_row(_pod_name(p.name, p.labels), p.ip, p.server.stats()) for p in stack.pods]

    rows = autoscaler.rows if autoscaler is not None else hand_made
    if not args.no_dashboard:
        dashboard = Dashboard(
            rows,
            out=out,
            title=f"pool {stack.samples.name} via {stack.envoy_url}",
            status=autoscaler.status if autoscaler is not None else None,
        )
        say.write = dashboard.note  # messages go above the live table
        tasks.append(start_guarded(dashboard.run(), name="epp-dev-dashboard"))
    try:
        if autoscaler is not None:
            say(f"waiting for the Deployment's first replicas to load ({autoscaler.config.load_delay:g}s)…")
            await autoscaler.wait_ready()
            say("replicas Ready; the picker routes to them")
        if args.load:
            samples = stack.samples
            kubernetes = stack.config.kubernetes  # without it there are no rewrites and no objectives to name
            load = LoadConfig(
                model=samples.model,
                lora_models=samples.rewritten_models if kubernetes else (),
                objectives=samples.objective_names if kubernetes else (),
                duration=args.duration or (60.0 if autoscaler else 20.0),
                concurrency=args.concurrency,
                seed=args.seed,
            )
            report = await run_load(stack.envoy_url, load)
            routed = ", ".join(f"{r.name}={r.routed}" for r in rows())
            say(f"{report.summary()}\n  routed:    {routed}\n")
            if args.exit_after_load:
                return 0
        await asyncio.Event().wait()  # until Ctrl-C cancels us
        return 0
    finally:
        await cancel_and_wait(tasks)


def _pod_name(name: str, labels: Mapping[str, str]) -> str:
    role = labels.get(ROLE_LABEL)
    return f"{name} ({role})" if role else name


def _write(out: TextIO, text: str) -> None:
    out.write(text)
    out.flush()


def run(args: argparse.Namespace) -> int:
    """``epp dev``: exit 0 after Ctrl-C or a finished ``--exit-after-load``; 1 if the stack cannot start."""
    if args.exit_after_load and not args.load:
        print("epp dev: --exit-after-load needs --load", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return asyncio.run(_dev(args, sys.stdout))
    except (StackError, ChildProcessError, OSError, ValueError) as e:
        print(f"epp dev: {e}", file=sys.stderr)
        return 1
