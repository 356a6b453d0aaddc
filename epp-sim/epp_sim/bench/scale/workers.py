"""``epp bench scale``'s several-cores part: the precise picker with ``--workers`` 1, 2, ... on the same load.

Long unique prompts through each precise picker's Envoy at ``worker_concurrency`` (enough streams
for every worker), the worker counts interleaved per round, so each count meets the same machine.
The picker's CPU is every process of it (the parent, its scrape worker and its serving children)
from ``/proc``; throughput is compared with one worker in the same run (the ratio the issue asks
for: >= 1.7 from one to two). On a 2-core machine Envoy and the load generator share the cores, so
the CPU per request says what each worker count costs whatever the ratio.
"""

from __future__ import annotations

from typing import Any

from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.scale.measure import interleaved_rounds, picker_rss_mib, summarise
from epp_sim.bench.scale.options import ScaleOptions
from epp_sim.bench.scale.stack import ScaleStack, precise_picker

__all__ = ["workers_scaling"]


async def workers_scaling(stack: ScaleStack, loads: LoadGenerator, options: ScaleOptions) -> list[dict[str, Any]]:
    """Per prompt size and worker count: throughput, latency, CPU per request, and the ratio to one worker."""
    out = []
    for kib in options.worker_prompt_kib:
        rounds = await interleaved_rounds(
            stack,
            loads,
            {workers: precise_picker(workers) for workers in options.workers},
            kib=kib,
            rounds=options.cpu_rounds,
            concurrency=options.worker_concurrency,
            seconds=options.round_seconds,
        )
        cells: dict[int, dict[str, Any]] = {}
        for workers, rs in rounds.items():
            picker = precise_picker(workers)
            cell: dict[str, Any] = {
                "workers": workers,
                "picker": picker,
                "prompt_kib": kib,
                "concurrency": options.worker_concurrency,
            }
            cell.update(summarise(rs), rss_mib=picker_rss_mib(stack, picker))
            cells[workers] = cell
        base = cells[1]["rps"]
        for workers, cell in cells.items():
            cell["throughput_vs_one_worker"] = cell["rps"] / base if base else None
            out.append(cell)
            print(
                f"  {kib:>4} KiB precise, {workers} worker(s): {cell['rps']:7.1f} req/s "
                f"({cell['throughput_vs_one_worker'] or 0:.2f}x one), "
                f"{cell['picker_cpu_ms_per_request'] or 0:8.2f} ms picker CPU per request",
                flush=True,
            )
    return out
