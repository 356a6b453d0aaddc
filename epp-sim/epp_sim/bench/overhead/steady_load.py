"""The picker under a steady load through its Envoy, profiled with py-spy (``--profile``).

Envoy drives ``epp serve`` with 1 KB prompts at concurrency 16 while py-spy samples it: the
profile says where its CPU goes. (Memory under load is :mod:`epp_sim.bench.overhead.memory`.)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.overhead.options import OverheadOptions, prompt_body
from epp_sim.bench.overhead.stack import Stack
from epp_sim.bench.profiling import record

__all__ = ["profile_picker"]

_CONCURRENCY = 16


async def _steady_load(stack: Stack, name: str) -> tuple[str, Path]:
    """The picker's Envoy and a 1 KB body file written for the load called ``name``."""
    body_file = stack.work / f"body-{name}.json"
    await asyncio.to_thread(body_file.write_bytes, prompt_body(1024))
    return f"127.0.0.1:{stack.envoys['epp'].port}", body_file


async def profile_picker(options: OverheadOptions, stack: Stack, loads: LoadGenerator) -> dict[str, Any]:
    """py-spy on the picker while Envoy drives it at concurrency 16 with 1 KB prompts."""
    target, body_file = await _steady_load(stack, "profile")
    load = asyncio.create_task(
        loads.http(target, body_file, concurrency=_CONCURRENCY, duration=options.profile_seconds + 1),
        name="bench-profile-load",
    )
    try:
        summary = await record(stack.epp.pid, options.profile_seconds, stack.work / "epp.pyspy.txt")
    finally:
        result = await load
    doc = summary.to_json()
    doc["rps_while_profiled"] = result.rate
    return doc
