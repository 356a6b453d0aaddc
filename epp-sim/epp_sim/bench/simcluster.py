"""A simulated cluster in its own process: N model-server simulators on ``127.0.0.2`` … sharing one port.

The routing benchmark runs the picker and the client in its own process and the simulators here,
so the two halves get a core each on a 2-core machine, and restarting this process between
strategies gives every strategy a cold cache and fresh counters. The ``SimConfig`` fields come in
as JSON (``--config '{"time_scale": 4, "max_loras": 2, ...}'``; ``lora_modules`` as an object,
``kv_events`` as vLLM's ``--kv-events-config`` object).

Run as ``python -m epp_sim.bench.simcluster --count 8 --port P --config JSON``; serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import signal
import sys
from collections.abc import Sequence

from epp_sim.modelserver import SimConfig, model_servers
from epp_sim.modelserver.kv_events import KvEventsConfig

__all__ = ["main"]


async def _serve(count: int, port: int, config: SimConfig) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with model_servers(count, port=port, config=config):
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the simulated-cluster child."""
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.simcluster", description=__doc__)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", default="{}", help="SimConfig fields as a JSON object")
    args = parser.parse_args(argv)
    try:
        fields = json.loads(args.config)
        if "kv_events" in fields:
            fields["kv_events"] = KvEventsConfig.parse(json.dumps(fields["kv_events"]))
        config = SimConfig(**fields)
    except (TypeError, ValueError) as e:
        parser.error(f"--config: {e}")
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(_serve(args.count, args.port, config))
    return 0


if __name__ == "__main__":
    sys.exit(main())
