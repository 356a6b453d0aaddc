"""The picker under a steady load through its Envoy: a py-spy profile, and a soak that samples memory.

Both are optional (``--profile``, ``--soak``) and both watch the ``epp serve`` process while
Envoy drives it with the same load, 1 KB prompts at concurrency 16: the profile says where its
CPU goes, the soak whether its resident memory keeps growing once warmed up (a leak).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.overhead.options import OverheadOptions, prompt_body
from epp_sim.bench.overhead.stack import Stack
from epp_sim.bench.procstat import rss_bytes
from epp_sim.bench.profiling import record

__all__ = ["profile_picker", "soak_picker"]

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


def _memory(stack: Stack, elapsed: float, requests: int) -> dict[str, float]:
    return {
        "t_s": round(elapsed, 1),
        "epp_rss_mib": rss_bytes(stack.epp.pid) / 2**20,
        "envoy_rss_mib": rss_bytes(stack.envoys["epp"].pid) / 2**20,
        "requests": requests,
    }


async def soak_picker(options: OverheadOptions, stack: Stack, loads: LoadGenerator) -> dict[str, Any]:
    """Constant load through the picker; RSS of the picker and its Envoy sampled every few seconds."""
    target, body_file = await _steady_load(stack, "soak")
    samples: list[dict[str, float]] = []
    started = time.monotonic()
    requests = 0
    while (elapsed := time.monotonic() - started) < options.soak_seconds:
        samples.append(_memory(stack, elapsed, requests))
        step = min(options.soak_sample_seconds, options.soak_seconds - elapsed)
        result = await loads.http(target, body_file, concurrency=_CONCURRENCY, duration=max(1.0, step))
        requests += result.requests
    samples.append(_memory(stack, time.monotonic() - started, requests))
    # Growth after the first fifth of the run (allocator warm-up, caches filling) is what leaks look like.
    settled = samples[len(samples) // 5]
    return {
        "seconds": options.soak_seconds,
        "requests": requests,
        "samples": samples,
        "epp_rss_growth_mib": samples[-1]["epp_rss_mib"] - settled["epp_rss_mib"],
    }
