"""``epp sim apiserver``: run the fake Kubernetes API server until SIGINT/SIGTERM.

Registered by the ``epp sim`` command group through ``add_parser(subparsers)``; prints the URL
(and writes ``--kubeconfig-out``) once listening. The flags reach what the Python API offers:

- ``--data-dir`` keeps the objects and the resourceVersion counter across restarts
  (:mod:`epp_sim.apiserver.persistence`); watches from before a restart get 410 Gone.
- ``--workloads`` runs the simulated Deployment → ReplicaSet → Pod controller
  (:class:`~epp_sim.workloads.WorkloadsController`) on this server's store, with
  ``--model-load-delay`` and, with ``--simulate-model-servers``, a simulated vLLM server on each
  Ready pod's ``podIP:containerPort``.

Bad flags exit with 2 and one line naming the flag; an unusable data directory or address exits 1.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import math
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from epp_sim.apiserver.persistence import FILE_NAME, DataDir, PersistenceError
from epp_sim.apiserver.server import ApiServer
from epp_sim.apiserver.store import Store
from epp_sim.modelserver.config import SimConfig
from epp_sim.workloads import WorkloadsController, sim_config_from_template

__all__ = ["add_parser"]

_FIRST_POD_IP = "127.0.0.100"


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
    p.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"keep objects and the resourceVersion counter in DIR/{FILE_NAME} across restarts "
        "(watches from before a restart get 410 Gone)",
    )
    w = p.add_argument_group("simulated workloads")
    w.add_argument(
        "--workloads",
        action="store_true",
        help="run the Deployment → ReplicaSet → Pod controller: pods get a podIP of their own and turn Ready",
    )
    w.add_argument(
        "--model-load-delay",
        type=float,
        default=None,
        metavar="SECONDS",
        help="seconds a new pod stays Pending and not Ready while its model loads (default 0)",
    )
    w.add_argument(
        "--simulate-model-servers",
        action="store_true",
        help="serve a simulated vLLM (OpenAI API, /metrics) on each Ready pod's podIP:containerPort; "
        "the model is the container's --model argument",
    )
    w.add_argument(
        "--first-pod-ip",
        default=None,
        metavar="IP",
        help=f"pods get addresses from this one up to .254 of its /24 (default {_FIRST_POD_IP})",
    )
    w.add_argument(
        "--time-scale",
        type=float,
        default=None,
        metavar="FACTOR",
        help="speed of the simulated model servers: 10 = ten times faster than real time (default 1)",
    )
    p.set_defaults(func=run)
    return p


def _flag_problem(args: argparse.Namespace) -> str | None:
    """The first bad flag, as one line naming it; None when all are good."""
    if not 0 <= args.port <= 65535:
        return f"--port must be 0..65535, got {args.port}"
    if args.history_limit < 0:
        return f"--history-limit must be >= 0, got {args.history_limit}"
    if not args.pod_grace_seconds >= 0:
        return f"--pod-grace-seconds must be >= 0, got {args.pod_grace_seconds}"
    if not args.bookmark_interval > 0:
        return f"--bookmark-interval must be > 0, got {args.bookmark_interval}"
    needs_workloads = {
        "--model-load-delay": args.model_load_delay is not None,
        "--simulate-model-servers": args.simulate_model_servers,
        "--first-pod-ip": args.first_pod_ip is not None,
    }
    for flag, given in needs_workloads.items():
        if given and not args.workloads:
            return f"{flag} needs --workloads"
    if args.time_scale is not None and not args.simulate_model_servers:
        return "--time-scale needs --simulate-model-servers"
    delay = args.model_load_delay
    if delay is not None and not (math.isfinite(delay) and delay >= 0):
        return f"--model-load-delay must be >= 0 seconds, got {delay}"
    scale = args.time_scale
    if scale is not None and not (math.isfinite(scale) and scale > 0):
        return f"--time-scale must be > 0, got {scale}"
    if args.first_pod_ip is not None:
        try:
            ip = ipaddress.IPv4Address(args.first_pod_ip)
        except ValueError:
            return f"--first-pod-ip must be an IPv4 address, got {args.first_pod_ip!r}"
        if not 1 <= ip.packed[3] <= 254:
            return f"--first-pod-ip must end in .1 to .254, got {ip}"
        if args.simulate_model_servers and not ip.is_loopback:
            return f"--first-pod-ip must be a loopback address (127.x.x.x) for --simulate-model-servers, got {ip}"
    return None


def run(args: argparse.Namespace) -> int:
    problem = _flag_problem(args)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 2
    data: DataDir | None = None
    try:
        if args.data_dir is not None:
            data = DataDir.open(args.data_dir)  # before the event loop runs: its blocking read stalls nothing
        asyncio.run(_serve(args, data))
    except PersistenceError as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        print(f"cannot serve on {args.host}:{args.port}: {e}", file=sys.stderr)
        return 1
    finally:
        if data is not None:
            data.close()
    return 0


def _workloads(store: Store, args: argparse.Namespace, kubeconfig: Path) -> WorkloadsController:
    base, _, first = str(ipaddress.IPv4Address(args.first_pod_ip or _FIRST_POD_IP)).rpartition(".")
    scale = args.time_scale

    def sim_config(template: dict[str, Any]) -> SimConfig:
        config = sim_config_from_template(template)
        return config if scale is None else dataclasses.replace(config, time_scale=scale)

    return WorkloadsController(
        store,
        load_delay=args.model_load_delay or 0.0,
        base_ip=f"{base}.",
        first_host=int(first),
        sim_config=sim_config,
        model_servers=args.simulate_model_servers,
        kubeconfig=str(kubeconfig),  # for the pods' `epp sidecar` (SSRF protection reads the pool)
    )


async def _serve(args: argparse.Namespace, data: DataDir | None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    store = Store(history_limit=args.history_limit, pod_grace_seconds=args.pod_grace_seconds, persistence=data)
    server = ApiServer(host=args.host, port=args.port, store=store, bookmark_interval=args.bookmark_interval)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(server.aclose)  # closes the store too: the final state reaches --data-dir
        await server.start()
        kubeconfig = args.kubeconfig_out
        if kubeconfig is None and args.workloads:
            work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-sim-apiserver-"))
            stack.push_async_callback(asyncio.to_thread, shutil.rmtree, work, True)
            kubeconfig = work / "kubeconfig"
        if kubeconfig is not None:
            await server.write_kubeconfig(kubeconfig)
        if args.workloads:
            await stack.enter_async_context(_workloads(store, args, kubeconfig))
        print(f"fake API server on {server.url}", flush=True)
        await stop.wait()
