"""``epp serve``: upstream flag names and defaults → :class:`ServeOptions` → the runtime until a signal."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import signal
import sys
from typing import Any

from epp.config.flags import add_serve_flags, no_effect_flags, options_from_args
from epp.config.go_flags import logging_options_from_args
from epp.config.options import LoggingOptions, OptionsError, ServeOptions
from epp.config.tls_policy import apply_cipher_suites

__all__ = ["STREAM_GRACE", "add_parser", "options_from_args"]

log = logging.getLogger(__name__)

# After the drain window, how long open streams may still run before they are cancelled (upstream
# waits without bound). 90 s = the manifests' terminationGracePeriodSeconds (130 s) − the default
# --drain-timeout (30 s) − 10 s for the rest of the stop, so the picker exits by itself, before
# kubelet's SIGKILL. A longer --drain-timeout needs a longer terminationGracePeriodSeconds.
STREAM_GRACE = 90.0


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


class _Signals:
    """SIGTERM asks for a graceful shutdown, SIGINT for a stop at once; a second signal exits 1 now."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.first: asyncio.Future[signal.Signals] = loop.create_future()
        self.received_at = 0.0  # loop time of the first signal
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._received, sig)

    def _received(self, sig: signal.Signals) -> None:
        if not self.first.done():
            self.received_at = self._loop.time()
            self.first.set_result(sig)
            log.info("signal received, shutting down", extra={"signal": sig.name})
            return
        # As upstream (controller-runtime's signal handler): the second signal skips everything left.
        log.warning("second signal: exiting at once", extra={"signal": sig.name})
        os._exit(1)


async def _serve(options: ServeOptions) -> None:
    """Serve until a signal; then stop as docs/deploy.md "Graceful shutdown" tells.

    SIGTERM: :meth:`Runtime.drain`, ``--drain-timeout`` of serving on, then open streams get up
    to :data:`STREAM_GRACE`. SIGINT: stop at once, cancelling open streams.
    """
    if options.tls.secure_serving:  # grpc core reads its cipher list once, when grpc is imported
        apply_cipher_suites(options.tls.grpc_cipher_list)
    from epp.runtime import Runtime  # the heavy imports only when actually serving

    loop = asyncio.get_running_loop()
    signals = _Signals(loop)
    runtime = Runtime(options)
    grace = 0.0
    try:
        await runtime.start()
        # Everything built so far lives as long as the process: keep it out of the garbage
        # collector's sweeps, which then visit only what requests allocate (shorter pauses).
        gc.freeze()
        if await signals.first == signal.SIGTERM:
            await runtime.drain()
            # The window counts from the signal, so a slow Lease release does not lengthen it.
            window_end = signals.received_at + options.drain_timeout
            await asyncio.sleep(max(0.0, window_end - loop.time()))
            grace = STREAM_GRACE
            log.info("drain window over: no new streams, waiting for open ones", extra={"grace_seconds": grace})
    finally:
        await runtime.stop(grace)


def list_plugins() -> int:
    """``--list-plugins``: every type a configuration may name, where it comes from, whether it loads."""
    from epp.config.installed_plugins import PluginClashError, discover, listing
    from epp.framework.plugin import PluginRegistry
    from epp.plugins import register_in_tree

    registry = PluginRegistry()
    register_in_tree(registry)
    try:
        installed = discover(registry)
    except PluginClashError as exc:
        print(f"epp serve: {exc}", file=sys.stderr)
        return 1
    rows = listing(registry, installed)
    width = max(len(row.type_name) for row in rows)
    print(f"{'TYPE':<{width}}  {'STABILITY':<12}  FROM")
    for row in rows:
        line = f"{row.type_name:<{width}}  {'experimental' if row.experimental else 'stable':<12}  {row.origin}"
        print(f"{line}: {row.note}" if row.note else line)
    return 0


def run(args: argparse.Namespace) -> int:
    from epp.telemetry.logs import level_for, setup_logging

    if args.list_plugins:
        return list_plugins()
    try:
        options = options_from_args(args)
    except OptionsError as e:
        # In the encoder asked for, when that flag itself is valid (upstream's logger exists before
        # its flags are checked, so a chart's JSON log pipeline sees this line too).
        try:
            setup_logging(logging_options_from_args(args))
        except OptionsError:
            setup_logging(LoggingOptions())
        log.error("epp serve: invalid flags", extra={"error": str(e)})
        return 2
    setup_logging(options.logging)
    if options.logging.zap_encoder == "json":
        # gRPC's C core writes plain-text lines of its own to stderr (a failed TLS handshake, a
        # GOAWAY...); silenced so every line stays one JSON object. Set before grpc is imported;
        # a GRPC_VERBOSITY the operator set wins.
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")
    # The picker starts children (the scrape worker, --workers) by fork and exec, never to run gRPC in a
    # forked copy: gRPC's fork handlers would only print a line of their own to stderr at each start.
    os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
    for note in no_effect_flags(options):
        log.warning("flag has no effect", extra={"flag": note})
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    try:
        asyncio.run(_serve(options))
    except Exception as e:  # start-up failures: say what failed, exit non-zero, no traceback spam
        log.error("epp serve failed: %s", e, exc_info=level_for(options.logging) <= logging.DEBUG)
        return 1
    return 0
