"""``epp sidecar``: the decode pod's routing sidecar, with the llm-d sidecar's flags, until a signal.

Flags (``options.py``) are checked first: a bad or unbuilt one exits 2 naming it. Then the
listeners start (a port in use, an unreadable certificate, an allowlist that cannot sync: exit 1),
and serve until SIGTERM or SIGINT, when open requests get a few seconds to finish.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
from typing import Any

from epp.sidecar.options import SidecarOptionsError, add_sidecar_flags, options_from_args
from epp.sidecar.server import Sidecar
from epp.telemetry.logs import setup_logging

__all__ = ["add_parser", "run"]

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "sidecar",
        help="run the decode pod's sidecar of disaggregated serving (remote prefill, then local decode)",
        description="The routing sidecar of a decode pod: when the picker names a prefill pod "
        "(x-prefiller-host-port), prefill there first, then decode on the local engine. Flag names "
        "and defaults follow the llm-d routing sidecar; defaults in brackets.",
    )
    add_sidecar_flags(p)
    p.set_defaults(func=run)
    return p


def run(args: argparse.Namespace) -> int:
    try:
        options = options_from_args(args)
    except SidecarOptionsError as e:
        print(f"epp sidecar: {e}", file=sys.stderr)
        return 2
    setup_logging(options.logging)
    for note in options.no_effect:
        log.warning("flag has no effect", extra={"detail": note})
    try:
        return asyncio.run(_serve(Sidecar(options)))
    except (OSError, RuntimeError, ValueError) as e:
        log.error("sidecar failed to start", extra={"error": str(e)})
        return 1


async def _serve(sidecar: Sidecar) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with sidecar:
        await stop.wait()
        log.info("signal received, shutting down")
    return 0
