"""One ``epp bench scale`` run: the picker idle over growing pools, its latency with and without them,
and its CPU per request for long prompts; one JSON document.

Per scrape mode (``in-loop``, ``process``: the same picker with ``--metrics-scrape-process``) and
pool size, the pool of that mode's picker grown to the size while the other pickers keep the base
pods. Idle: the picker's own CPU from ``/proc/<pid>/stat`` (its scrape worker's included) over
``idle_seconds`` with no requests, each pod's fetches per second and the
mean interval achieved (the picker's ``epp_scrape_duration_seconds_count`` and
``epp_scrape_interval_seconds``), the endpoints' metric ages at the end, scrape errors, RSS.

Latency, per pool size: interleaved c=1 rounds of 1 KiB completions through Envoy with the pool
at that size and at the base size (``without``), so the p50 the pods add to a request is measured
against the same picker in the same minute.

CPU per request, with the pool at its base size: each prompt size through each configuration's
Envoy at ``concurrency``, configurations interleaved per round, every prompt ending differently
(no token or prefix cache serves one whole). CPU is the picker's over the round divided by the
requests it routed.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from typing import Any

import aiohttp

from epp.datalayer.promtext import parse
from epp_sim.bench.children import bench_work_dir
from epp_sim.bench.loadtools import LoadGenerator
from epp_sim.bench.overhead.rounds import Round, measured
from epp_sim.bench.procstat import cpu_seconds, rss_bytes
from epp_sim.bench.report import machine_info
from epp_sim.bench.scale.measure import interleaved_rounds, picker_pids, picker_rss_mib, summarise
from epp_sim.bench.scale.options import ScaleOptions, scale_prompt_body
from epp_sim.bench.scale.stack import ScaleStack, start_scale_stack
from epp_sim.bench.scale.targets import scale_targets
from epp_sim.bench.scale.workers import workers_scaling
from epp_sim.stack.envoy import envoy_binary

__all__ = ["run_scale"]

_COUNTERS = (
    "epp_scrape_duration_seconds_count",
    "epp_scrape_interval_seconds_sum",
    "epp_scrape_interval_seconds_count",
    "epp_scrape_errors_total",
    "epp_endpoint_metrics_age_seconds",
)


def _totals(page: str) -> dict[str, float]:
    samples = parse(page, _COUNTERS).samples
    return {name: sum(s.value for s in samples.get(name, ())) for name in _COUNTERS}


async def _idle(stack: ScaleStack, session: aiohttp.ClientSession, mode: str, seconds: float) -> dict[str, Any]:
    """``mode``'s picker with its current pool and no requests, for ``seconds``."""
    pids = picker_pids(stack, mode)
    before = _totals(await stack.picker_page(session, mode))
    cpu0, wall0 = {k: cpu_seconds(p) for k, p in pids.items()}, time.perf_counter()
    await asyncio.sleep(seconds)
    wall = time.perf_counter() - wall0
    cpu = {k: cpu_seconds(p) - cpu0[k] for k, p in pids.items()}
    page = await stack.picker_page(session, mode)
    after = _totals(page)
    ages = sorted(s.value for s in parse(page, [_COUNTERS[-1]]).samples.get(_COUNTERS[-1], ()))
    delta = {k: after[k] - before[k] for k in _COUNTERS[:-1]}
    pods = stack.pool_sizes[mode]
    intervals = delta["epp_scrape_interval_seconds_count"]
    fetches = delta["epp_scrape_duration_seconds_count"]
    total_cpu = sum(cpu.values())
    return {
        "mode": mode,
        "pods": pods,
        "seconds": wall,
        "cpu_cores": total_cpu / wall,
        "serving_process_cores": cpu["picker"] / wall,
        "fetches_per_pod_per_s": fetches / pods / wall,
        "cpu_per_fetch_us": total_cpu / max(1.0, fetches) * 1e6,
        "achieved_interval_ms": delta["epp_scrape_interval_seconds_sum"] / intervals * 1e3 if intervals else None,
        "metrics_age_p50_ms": statistics.median(ages) * 1e3 if ages else None,
        "metrics_age_max_ms": ages[-1] * 1e3 if ages else None,
        "errors": int(delta["epp_scrape_errors_total"]),
        "rss_mib": sum(rss_bytes(p) for p in pids.values()) / 2**20,
    }


async def _latency(
    stack: ScaleStack, session: aiohttp.ClientSession, loads: LoadGenerator, mode: str, options: ScaleOptions
) -> dict[str, Any]:
    """c=1 rounds through ``mode``'s picker with its pool at its current size and at the base size, interleaved."""
    pods = stack.pool_sizes[mode]
    body = stack.work / "body-1k.json"
    await asyncio.to_thread(body.write_bytes, scale_prompt_body(1))
    target = f"127.0.0.1:{stack.envoys[mode].port}"
    rounds: dict[str, list[Round]] = {"with": [], "without": []}
    for _ in range(options.latency_rounds):
        for label, size in (("with", pods), ("without", options.base_pods)):
            await stack.resize(session, mode, size)
            load = loads.http(target, body, concurrency=1, duration=options.round_seconds)
            rounds[label].append(await measured(picker_pids(stack, mode), load))
    with_pods, without = summarise(rounds["with"]), summarise(rounds["without"])
    return {
        "mode": mode,
        "pods": pods,
        "with": with_pods,
        "without": without,
        "added_p50_ms": with_pods["p50_ms"] - without["p50_ms"],
    }


async def _cpu_per_request(stack: ScaleStack, loads: LoadGenerator, options: ScaleOptions) -> list[dict[str, Any]]:
    """Each prompt size through each configuration's picker (base pods only), interleaved rounds."""
    pickers = {config: options.scrape_modes[0] if config == "default" else config for config in options.configs}
    out = []
    for kib in options.prompt_kib:
        rounds = await interleaved_rounds(
            stack,
            loads,
            pickers,
            kib=kib,
            rounds=options.cpu_rounds,
            concurrency=options.concurrency,
            seconds=options.round_seconds,
        )
        for config, rs in rounds.items():
            picker = pickers[config]
            cell = {"config": config, "picker": picker, "prompt_kib": kib, "concurrency": options.concurrency}
            cell.update(summarise(rs), rss_mib=picker_rss_mib(stack, picker))
            out.append(cell)
            print(
                f"  {kib:>4} KiB {config:<8} {cell['rps']:7.0f} req/s  "
                f"{cell['picker_cpu_ms_per_request'] or 0:8.2f} ms picker CPU per request",
                flush=True,
            )
    return out


async def run_scale(options: ScaleOptions) -> dict[str, Any]:
    """Run the whole scale benchmark and return its JSON document (logs are kept only on failure)."""
    started = time.monotonic()
    load_start = os.getloadavg()
    async with bench_work_dir("scale") as work:
        loads = LoadGenerator(work, options.loadgen)
        doc: dict[str, Any] = {
            "benchmark": "scale",
            "machine": await machine_info(envoy_binary()),
            "options": {
                "pods": list(options.pods),
                "base_pods": options.base_pods,
                "idle_seconds": options.idle_seconds,
                "latency_rounds": options.latency_rounds,
                "round_seconds": options.round_seconds,
                "prompt_kib": list(options.prompt_kib),
                "configs": list(options.configs),
                "concurrency": options.concurrency,
                "cpu_rounds": options.cpu_rounds,
                "scrape_modes": list(options.scrape_modes),
                "http_loadgen": loads.http_tool,
                "scrape_interval_s": 0.05,
            },
            "idle": [],
            "latency": [],
        }
        async with (
            start_scale_stack(options, work) as stack,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        ):
            doc["options"]["tokenizer"] = stack.tokenizer
            for mode in options.scrape_modes:
                doc["idle"].append(await _idle(stack, session, mode, options.idle_seconds))
            for pods in options.pods:
                for mode in options.scrape_modes:
                    await stack.resize(session, mode, pods)
                    idle = await _idle(stack, session, mode, options.idle_seconds)
                    doc["idle"].append(idle)
                    latency = await _latency(stack, session, loads, mode, options)
                    doc["latency"].append(latency)
                    await stack.resize(session, mode, options.base_pods)
                    print(
                        f"  {pods:>4} pods {mode:<8}: idle {idle['cpu_cores']:.3f} cores, "
                        f"{idle['fetches_per_pod_per_s']:.1f} fetches/pod/s; c=1 p50 "
                        f"{latency['without']['p50_ms']:.2f} → {latency['with']['p50_ms']:.2f} ms",
                        flush=True,
                    )
            doc["cpu_per_request"] = await _cpu_per_request(stack, loads, options)
            if options.workers:
                doc["workers"] = await workers_scaling(stack, loads, options)
    doc["load_average"] = {"start": list(load_start), "end": list(os.getloadavg())}
    doc["targets"] = scale_targets(doc)
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    return doc
