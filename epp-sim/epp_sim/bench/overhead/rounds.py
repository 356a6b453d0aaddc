"""Interleaved rounds: the three Envoys through HTTP, and the two processors over raw ext_proc.

Per prompt size and concurrency, rounds of (envoy, noop, epp, envoy, noop, epp, …) of a few
seconds each run a closed-loop load, so machine noise hits every variant alike. Each round is
charged with the CPU its processes used (``/proc/<pid>/stat`` before and after). Per variant the
rounds are summed into requests/s, the median of the rounds' percentiles and CPU per request;
per cell the picker's ratios against the other two and the picker's own per-phase histogram.
"""

from __future__ import annotations

import asyncio
import logging
import statistics
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from epp_sim.bench.loadgen import LoadResult
from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.overhead.options import OverheadOptions, prompt_body
from epp_sim.bench.overhead.phases import phase_overhead
from epp_sim.bench.overhead.stack import VARIANTS, Stack, picker_metrics
from epp_sim.bench.procstat import cpu_seconds

__all__ = ["Round", "grpc_direct", "http_cells", "measured"]

log = logging.getLogger(__name__)


@dataclass
class Round:
    """One load run and the CPU seconds each process used during it."""

    load: LoadResult
    cpu: dict[str, float]


def _cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


async def measured(pids: dict[str, int], load: Awaitable[LoadResult]) -> Round:
    """Run ``load`` (a coroutine not yet started) and charge the CPU the processes used meanwhile."""
    before = _cpu_of(pids)
    result = await load
    after = _cpu_of(pids)
    return Round(result, {k: after[k] - before[k] for k in pids})


def _summarise(variant: str, size: int, concurrency: int, rounds: Sequence[Round]) -> dict[str, Any]:
    requests = sum(r.load.requests for r in rounds)
    duration = sum(r.load.duration for r in rounds)
    cpu: dict[str, float] = {}
    for r in rounds:
        for name, seconds in r.cpu.items():
            cpu[name] = cpu.get(name, 0.0) + seconds
    cpu["loadgen"] = sum(r.load.loadgen_cpu for r in rounds)
    return {
        "variant": variant,
        "prompt_bytes": size,
        "concurrency": concurrency,
        "tool": rounds[0].load.tool,
        "rounds": len(rounds),
        "requests": requests,
        "errors": sum(r.load.errors for r in rounds),
        "rps": requests / duration if duration else 0.0,
        "rps_rounds": [round(r.load.rate, 1) for r in rounds],
        "p50_ms": statistics.median(r.load.p50 for r in rounds) * 1e3,
        "p90_ms": statistics.median(r.load.p90 for r in rounds) * 1e3,
        "p99_ms": statistics.median(r.load.p99 for r in rounds) * 1e3,
        "cpu_cores": {k: v / duration for k, v in cpu.items()} if duration else {},
        "cpu_us_per_request": {k: v / requests * 1e6 for k, v in cpu.items()} if requests else {},
    }


async def http_cells(
    options: OverheadOptions, stack: Stack, loads: LoadGenerator, session: aiohttp.ClientSession
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every (prompt size, concurrency) cell through the three Envoys; the cells and the picker's phases."""
    cells: list[dict[str, Any]] = []
    phases: list[dict[str, Any]] = []
    for size in options.prompt_bytes:
        body_file = stack.work / f"body-{size}.json"
        await asyncio.to_thread(body_file.write_bytes, prompt_body(size))
        for concurrency in options.concurrencies:
            rounds: dict[str, list[Round]] = {v: [] for v in VARIANTS}
            metrics_before = await picker_metrics(session, stack)
            for _ in range(options.rounds):
                for variant in VARIANTS:
                    target = f"127.0.0.1:{stack.envoys[variant].port}"
                    load = loads.http(target, body_file, concurrency=concurrency, duration=options.round_seconds)
                    rounds[variant].append(await measured(stack.pids(variant), load))
            metrics_after = await picker_metrics(session, stack)
            summary = {v: _summarise(v, size, concurrency, rounds[v]) for v in VARIANTS}
            epp, noop, envoy = summary["epp"], summary["noop"], summary["envoy"]
            for cell in summary.values():
                cell["rps_vs_noop"] = epp["rps"] / noop["rps"] if noop["rps"] else 0.0
                cell["rps_vs_envoy"] = epp["rps"] / envoy["rps"] if envoy["rps"] else 0.0
                cell["added_p50_vs_noop_ms"] = epp["p50_ms"] - noop["p50_ms"]
                cell["added_p50_vs_envoy_ms"] = epp["p50_ms"] - envoy["p50_ms"]
            cells.extend(summary.values())
            phases.append(
                {
                    "prompt_bytes": size,
                    "concurrency": concurrency,
                    "phases": phase_overhead(metrics_before, metrics_after),
                }
            )
            log.info("overhead cell done", extra={"size": size, "concurrency": concurrency})
            print(
                f"  {size // 1024:>4} KB c={concurrency:<3} envoy {envoy['rps']:7.0f}/s  noop {noop['rps']:7.0f}/s  "
                f"epp {epp['rps']:7.0f}/s  (epp/noop {epp['rps_vs_noop']:.2f})",
                flush=True,
            )
    return cells, phases


async def grpc_direct(options: OverheadOptions, stack: Stack, loads: LoadGenerator) -> list[dict[str, Any]]:
    """ext_proc streams/s straight to each processor, interleaved rounds, no Envoy."""
    out = []
    for size in options.prompt_bytes:
        body = prompt_body(size)
        rounds: dict[str, list[Round]] = {"noop": [], "epp": []}
        for _ in range(options.rounds):
            for name, target, pid in (
                ("noop", stack.noop_grpc, stack.noop.pid),
                ("epp", stack.epp_grpc, stack.epp.pid),
            ):
                load = loads.grpc(target, body, concurrency=options.grpc_concurrency, duration=options.round_seconds)
                rounds[name].append(await measured({"processor": pid}, load))
        for name, rs in rounds.items():
            cell = _summarise(name, size, options.grpc_concurrency, rs)
            cell["streams_per_s"] = cell.pop("rps")
            out.append(cell)
    return out
