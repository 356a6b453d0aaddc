"""``epp dev``: the local stack on embedded defaults, one command on a fresh checkout.

Starts :class:`~epp.dev.stack.LocalStack` (fake API server with the sample pool, simulated pods,
``epp serve``, Envoy), prints where everything is and a ready-to-paste ``curl``, then shows the
live per-pod table until Ctrl-C (or SIGTERM), which stops every child and removes the work
directory. ``--load`` drives the mixed workload of :mod:`epp.dev.load` for ``--duration``
seconds; ``--exit-after-load`` then stops instead of waiting for Ctrl-C.
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
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from epp.dev.dashboard import Dashboard, pod_row
from epp.dev.load import OBJECTIVE_HEADER, LoadConfig, run_load
from epp.dev.processes import ChildProcessError
from epp.dev.stack import DEFAULT_ENVOY_PORT, DEFAULT_MANIFESTS, LocalStack, StackConfig, StackError
from epp.tasks import cancel_and_wait, start_guarded

__all__ = ["add_parser", "banner", "curl_command", "run"]

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "dev",
        help="run the whole stack locally: fake API server, simulated pods, the picker and Envoy",
        description="Start a fake Kubernetes API server with the sample InferencePool, objectives and "
        "rewrite from manifests/, simulated vLLM pods on 127.0.0.x, the picker (epp serve) and Envoy; "
        "print a curl to try and a live per-pod table. Ctrl-C stops everything.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--pods", type=int, default=4, help="simulated model-server pods")
    p.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"Envoy listener port (default: {DEFAULT_ENVOY_PORT} if free, else any free port; 0: any)",
    )
    p.add_argument("--time-scale", type=float, default=1.0, help="simulator speed-up (10 = ten times faster)")
    p.add_argument("--load", action="store_true", help="drive a short mixed workload through Envoy")
    p.add_argument("--duration", type=_positive(float), default=20.0, help="seconds of --load")
    p.add_argument("--concurrency", type=_positive(int), default=8, help="concurrent requests of --load")
    p.add_argument("--seed", type=int, default=0, help="seed of the --load workload")
    p.add_argument("--exit-after-load", action="store_true", help="stop once --load is done")
    p.add_argument("--no-dashboard", action="store_true", help="do not draw the live per-pod table")
    p.add_argument("--manifests", type=Path, default=DEFAULT_MANIFESTS, help="folder with crds/ and samples/")
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


def banner(stack: LocalStack) -> str:
    """What ``epp dev`` prints once everything is up."""
    samples = stack.samples
    pods = ", ".join(p.address for p in stack.pods)
    lines = [
        f"epp dev: pool {samples.namespace}/{samples.name}, {len(stack.pods)} simulated pods ({pods})",
        f"  Envoy:          {stack.envoy_url}",
        f"  picker metrics: {stack.picker_metrics_url}",
        f"  kubeconfig:     {stack.kubeconfig}",
        f"                  {_kubectl()} --kubeconfig {stack.kubeconfig} get pods,inferencepools",
        f"  logs:           {stack.work_dir} (removed on exit)",
        "",
        "Try:",
        f"  {curl_command(stack.envoy_url, samples.model)}",
    ]
    if samples.rewritten_models:
        headers = {OBJECTIVE_HEADER: samples.objective_names[-1]} if samples.objective_names else None
        lines.append(f"  {curl_command(stack.envoy_url, samples.rewritten_models[0], headers=headers)}")
        lines.append(
            f"  (the second asks for {samples.rewritten_models[0]!r}, which a rewrite sends to a LoRA adapter)"
        )
    lines += ["", "Ctrl-C stops everything."]
    return "\n".join(lines) + "\n"


async def _dev(args: argparse.Namespace, out: TextIO) -> int:
    config = StackConfig(pods=args.pods, envoy_port=args.port, time_scale=args.time_scale, manifests=args.manifests)
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
        async with LocalStack(config) as stack:
            out.write(banner(stack))
            out.flush()
            return await _run(stack, args, out)
    except asyncio.CancelledError:
        if not stopping:
            raise
        out.write("stopped\n")
        return 0
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _run(stack: LocalStack, args: argparse.Namespace, out: TextIO) -> int:
    """Dashboard and load while the stack runs; return when the load is done (if asked) or never."""
    tasks: list[asyncio.Task[Any]] = []
    say: Callable[[str], None] = functools.partial(_write, out)
    if not args.no_dashboard:
        dashboard = Dashboard(
            lambda: [pod_row(p.name, p.ip, p.server.stats()) for p in stack.pods],
            out=out,
            title=f"pool {stack.samples.name} via {stack.envoy_url}",
        )
        say = dashboard.note  # messages go above the live table
        tasks.append(start_guarded(dashboard.run(), name="epp-dev-dashboard"))
    try:
        if args.load:
            samples = stack.samples
            load = LoadConfig(
                model=samples.model,
                lora_models=samples.rewritten_models,
                objectives=samples.objective_names,
                duration=args.duration,
                concurrency=args.concurrency,
                seed=args.seed,
            )
            report = await run_load(stack.envoy_url, load)
            routed = ", ".join(f"{p.name}={p.server.stats()['requests']}" for p in stack.pods)
            say(f"{report.summary()}\n  routed:    {routed}\n")
            if args.exit_after_load:
                return 0
        await asyncio.Event().wait()  # until Ctrl-C cancels us
        return 0
    finally:
        await cancel_and_wait(tasks)


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
