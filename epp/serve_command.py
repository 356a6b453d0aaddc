"""``epp serve``: upstream flag names and defaults → :class:`ServeOptions` → the runtime until a signal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from typing import Any

from epp.config.flags import add_serve_flags, no_effect_flags, options_from_args
from epp.config.options import OptionsError, ServeOptions

__all__ = ["add_parser", "options_from_args"]

log = logging.getLogger(__name__)


def add_parser(subparsers: Any) -> argparse.ArgumentParser:
    p: argparse.ArgumentParser = subparsers.add_parser(
        "serve",
        help="run the endpoint picker (Envoy ext_proc server)",
        description="Run the endpoint picker: an Envoy ext_proc gRPC server that picks the model-server "
        "endpoint for each request. Flag names and defaults follow the upstream picker (GIE, llm-d).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_serve_flags(p)
    p.set_defaults(func=run)
    return p


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
    setup_logging(options.logging)
    for note in no_effect_flags(options):
        log.info("flag has no effect", extra={"flag": note})
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    try:
        asyncio.run(_serve(options))
    except Exception as e:  # start-up failures: say what failed, exit non-zero, no traceback spam
        log.error("epp serve failed: %s", e, exc_info=options.logging.verbosity >= 4)
        return 1
    return 0
