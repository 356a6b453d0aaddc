"""A simulated cluster in its own process: N model-server simulators on ``127.0.0.2`` … sharing one port.

The routing benchmark runs the picker and the client in its own process and the simulators here,
so the two halves get a core each on a 2-core machine, and restarting this process between
strategies gives every strategy a cold cache and fresh counters. The ``SimConfig`` fields come in
as JSON (``--config '{"time_scale": 4, "max_loras": 2, ...}'``; ``lora_modules`` as an object,
``kv_events`` as vLLM's ``--kv-events-config`` object).

A disaggregated cluster (``--roles prefill,prefill,decode,…``, one per server) serves each
prefill pod's simulator on the port, and each decode pod's on ``--engine-port`` behind an
``epp sidecar`` on the port (``--sidecar-args``: a JSON list of its extra flags), as a decode pod's
containers are laid out in ``manifests/overlays/pd``; the sidecars run in this process too.

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
from contextlib import AsyncExitStack

from epp.framework.roles import DECODE, PREFILL
from epp_sim.modelserver import ModelServer, SimConfig, model_servers
from epp_sim.modelserver.kv_events import KvEventsConfig
from epp_sim.stack.sidecars import sidecar_for

__all__ = ["main"]


async def _serve(
    count: int, port: int, config: SimConfig, roles: Sequence[str], engine_port: int, sidecar: list[str]
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    if not roles:
        async with model_servers(count, port=port, config=config):
            await stop.wait()
        return
    async with AsyncExitStack() as stack:
        for i, role in enumerate(roles):
            host = f"127.0.0.{2 + i}"
            if role == DECODE:
                await stack.enter_async_context(ModelServer(config, host=host, port=engine_port))
                await stack.enter_async_context(sidecar_for(host, port, engine_port, 1, sidecar))
            else:
                await stack.enter_async_context(ModelServer(config, host=host, port=port))
        await stop.wait()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the simulated-cluster child."""
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.simcluster", description=__doc__)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--config", default="{}", help="SimConfig fields as a JSON object")
    parser.add_argument("--roles", default="", help="prefill or decode per server, comma-separated (none: aggregated)")
    parser.add_argument("--engine-port", type=int, default=0, help="where a decode pod's simulator listens")
    parser.add_argument("--sidecar-args", default="[]", help="a decode pod's epp sidecar flags, as a JSON list")
    args = parser.parse_args(argv)
    roles = [r for r in args.roles.split(",") if r]
    if roles and (len(roles) != args.count or set(roles) - {PREFILL, DECODE}):
        parser.error(f"--roles: {args.count} of prefill or decode, got {args.roles!r}")
    if DECODE in roles and not args.engine_port:
        parser.error("--engine-port is required with decode pods")
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
    asyncio.run(_serve(args.count, args.port, config, roles, args.engine_port, json.loads(args.sidecar_args)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
