"""Run :class:`~epp_sim.bench.noop_processor.NoopProcessor` as its own process, as the picker runs.

The overhead benchmark compares Envoy + this process with Envoy + ``epp serve``; both are
separate processes on the same event-loop stack (uvloop when installed, as ``epp serve``), so
the difference is the picker's own work. Run as
``python -m epp_sim.bench.noop_server --port P --destination 127.0.0.2:8000,127.0.0.3:8000``; serves until
SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from epp_sim.bench.noop_processor import NoopProcessor

__all__ = ["main"]


async def _serve(host: str, port: int, destinations: Sequence[str]) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    processor = NoopProcessor(destinations)
    await processor.start(host, port)
    try:
        await stop.wait()
    finally:
        await processor.stop(1.0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the no-op processor child."""
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.noop_server", description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--destination", default="", help="comma-separated ip:port list, routed to round robin")
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    destinations = [d for d in args.destination.split(",") if d]
    asyncio.run(_serve(args.host, args.port, destinations))
    return 0


if __name__ == "__main__":
    sys.exit(main())
