"""One ``epp bench overhead`` run, start to finish: stack up, every measurement in turn, one JSON document.

The order is fixed so each part runs on a warm, otherwise idle stack: the interleaved HTTP
rounds, ext_proc straight to the processors, the scraper alone, then the optional profile and
memory soak (with processes of its own: stock and graceful Envoys), and last the resident memory
of the processes; the targets are judged on the result.
"""

from __future__ import annotations

import time
from typing import Any

import aiohttp

from epp_sim.bench.children import bench_work_dir
from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.overhead.memory import memory_soak
from epp_sim.bench.overhead.options import OverheadOptions
from epp_sim.bench.overhead.rounds import grpc_direct, http_cells
from epp_sim.bench.overhead.stack import Stack, start_stack
from epp_sim.bench.overhead.steady_load import profile_picker
from epp_sim.bench.overhead.targets import overhead_targets
from epp_sim.bench.procstat import rss_bytes
from epp_sim.bench.report import machine_info
from epp_sim.bench.scrape_cost import measure_in_child
from epp_sim.stack.envoy import envoy_binary

__all__ = ["run_overhead"]


async def _scrape_costs(options: OverheadOptions, stack: Stack) -> list[dict[str, Any]]:
    return [
        await measure_in_child(count=count, port=stack.backend_port, duration=options.scrape_seconds)
        for count in options.scrape_endpoints
    ]


async def run_overhead(options: OverheadOptions) -> dict[str, Any]:
    """Run the whole overhead benchmark and return its JSON document (logs are kept only on failure)."""
    started = time.monotonic()
    async with bench_work_dir("overhead") as work:
        loads = LoadGenerator(work, options.loadgen)
        doc: dict[str, Any] = {
            "benchmark": "overhead",
            "machine": await machine_info(envoy_binary()),
            "options": {
                "endpoints": options.endpoints,
                "concurrencies": list(options.concurrencies),
                "prompt_bytes": list(options.prompt_bytes),
                "rounds": options.rounds,
                "round_seconds": options.round_seconds,
                "scrape_interval_s": 0.05,
                "http_loadgen": loads.http_tool,
                "grpc_loadgen": loads.grpc_tool,
                "envoy_body_mode": "FULL_DUPLEX_STREAMED (request and response), route by envoy.lb metadata",
            },
        }
        async with (
            start_stack(options, work) as stack,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        ):
            doc["http"], doc["picker_phases"] = await http_cells(options, stack, loads, session)
            doc["grpc_direct"] = await grpc_direct(options, stack, loads)
            doc["scrape"] = await _scrape_costs(options, stack)
            if options.profile_seconds > 0:
                doc["profile"] = await profile_picker(options, stack, loads)
            if options.soak_seconds > 0:
                doc["soak"] = await memory_soak(options, stack, loads)
            doc["rss_mib"] = {
                "epp": rss_bytes(stack.epp.pid) / 2**20,
                "noop": rss_bytes(stack.noop.pid) / 2**20,
                "envoy": rss_bytes(stack.envoys["epp"].pid) / 2**20,
            }
    doc["targets"] = overhead_targets(doc)
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    return doc
