"""``epp sim apiserver``: run the fake Kubernetes API server until SIGINT/SIGTERM.

Registered by the ``epp sim`` command group through ``add_parser(subparsers)``; prints the URL
(and writes ``--kubeconfig-out``) once listening.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from pathlib import Path
from typing import Any

from epp_sim.apiserver.server import ApiServer

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``apiserver`` on an ``argparse`` subparsers object (the ``epp sim`` group)."""
    p: argparse.ArgumentParser = subparsers.add_parser(
        "apiserver", help="fake Kubernetes API server (kubectl, kr8s and the kubernetes client work against it)"
    )
    p.add_argument("--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="listen port; 0 picks a free one (default 0)")
    p.add_argument("--kubeconfig-out", type=Path, default=None, help="write a kubeconfig for this server here")
    p.add_argument(
        "--history-limit",
        type=int,
        default=10_000,
        help="watch events kept; older resourceVersions get 410 Gone (default 10000)",
    )
    p.add_argument(
        "--pod-grace-seconds",
        type=float,
        default=0.0,
        help="grace period of pod deletes that name none (default 0: immediate)",
    )
    p.add_argument(
        "--bookmark-interval",
        type=float,
        default=1.0,
        help="seconds between watch BOOKMARKs when asked for (default 1)",
    )
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    if args.port < 0 or args.port > 65535:
        print(f"--port must be 0..65535, got {args.port}", file=sys.stderr)
        return 2
    if args.history_limit < 0 or args.bookmark_interval <= 0 or args.pod_grace_seconds < 0:
        print("--history-limit and --pod-grace-seconds must be >= 0, --bookmark-interval > 0", file=sys.stderr)
        return 2
    try:
        asyncio.run(_serve(args))
    except OSError as e:
        print(f"cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    return 0


async def _serve(args: argparse.Namespace) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with ApiServer(
        host=args.host,
        port=args.port,
        history_limit=args.history_limit,
        pod_grace_seconds=args.pod_grace_seconds,
        bookmark_interval=args.bookmark_interval,
    ) as server:
        if args.kubeconfig_out is not None:
            await server.write_kubeconfig(args.kubeconfig_out)
        print(f"fake API server on {server.url}", flush=True)
        await stop.wait()
