"""What ``epp bench scale`` reads off a picker: its processes, and a set of load rounds summed up."""

from __future__ import annotations

import asyncio
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar

from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.overhead.rounds import Round, measured
from epp_sim.bench.procstat import child_pids, rss_bytes
from epp_sim.bench.scale.options import scale_prompt_body
from epp_sim.bench.scale.stack import ScaleStack

__all__ = ["interleaved_rounds", "picker_pids", "picker_rss_mib", "summarise"]

K = TypeVar("K")


def picker_pids(stack: ScaleStack, picker: str) -> dict[str, int]:
    """The picker's process and its children (a scrape worker, ``--workers`` children)."""
    pid = stack.pickers[picker].pid
    return {"picker": pid, **{f"child-{i}": child for i, child in enumerate(child_pids(pid))}}


def summarise(rounds: Sequence[Round]) -> dict[str, Any]:
    requests = sum(r.load.requests for r in rounds)
    duration = sum(r.load.duration for r in rounds)
    cpu = sum(sum(r.cpu.values()) for r in rounds)
    return {
        "rounds": len(rounds),
        "requests": requests,
        "errors": sum(r.load.errors for r in rounds),
        "rps": requests / duration if duration else 0.0,
        "p50_ms": statistics.median(r.load.p50 for r in rounds) * 1e3,
        "p99_ms": statistics.median(r.load.p99 for r in rounds) * 1e3,
        "picker_cores": cpu / duration if duration else 0.0,
        "picker_cpu_ms_per_request": cpu / requests * 1e3 if requests else None,
    }


def picker_rss_mib(stack: ScaleStack, picker: str) -> float:
    return sum(rss_bytes(p) for p in picker_pids(stack, picker).values()) / 2**20


async def interleaved_rounds(
    stack: ScaleStack,
    loads: LoadGenerator,
    pickers: Mapping[K, str],
    *,
    kib: int,
    rounds: int,
    concurrency: int,
    seconds: float,
) -> dict[K, list[Round]]:
    """``rounds`` rounds of unique ``kib`` KiB prompts through each of ``pickers``' Envoys in turn, each charged
    the CPU of that picker's processes."""
    body = stack.work / f"body-{kib}k.json"
    await asyncio.to_thread(body.write_bytes, scale_prompt_body(kib))
    out: dict[K, list[Round]] = {key: [] for key in pickers}
    for r in range(rounds):
        for key, picker in pickers.items():
            target = f"127.0.0.1:{stack.envoys[picker].port}"
            run = f"{os.getpid()}-{picker}-{kib}-{r}"
            load = loads.http(target, body, concurrency=concurrency, duration=seconds, unique=run)
            out[key].append(await measured(picker_pids(stack, picker), load))
    return out
