"""One ``epp bench routing`` run: every (workload, load, strategy) on a fresh cluster, one JSON document.

Each workload's capacity is estimated once from a reference sample, each offered load is a
fraction of it, and every strategy at that load replays the same seeded arrivals on a cluster
restarted for it. The picker runs in this process, as ``epp serve`` builds it: a ``Datastore``
over the simulators, the production ``ScraperManager`` polling their ``/metrics`` every 50 ms,
and the strategy's route (over one or more picker replicas); a run starts only once every
simulator has been scraped. A real-token workload's clusters run the bench tokenizer (written
once per run into the work directory) and publish KV events on a port of their own. A P/D
strategy's cluster labels its pods prefill and decode (:func:`prefill_pods`) and puts an
``epp sidecar`` in front of each decode pod's simulator.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from epp.clock import SystemClock
from epp.datalayer.scraper import ScraperManager
from epp.framework.roles import DECODE, PREFILL
from epp.slo.embedded import EmbeddedPredictor, EmbeddedSettings
from epp.telemetry.metrics import EppMetrics
from epp_sim.bench.children import bench_work_dir
from epp_sim.bench.procstat import cpu_seconds
from epp_sim.bench.report import machine_info
from epp_sim.bench.routing.cluster import (
    bench_sim_config,
    counters_since,
    pool_store,
    server_counters,
    start_cluster,
)
from epp_sim.bench.routing.options import RoutingOptions
from epp_sim.bench.routing.replay import replay
from epp_sim.bench.routing.scoring import routing_targets, run_record
from epp_sim.bench.routing.strategies import LEARNING, STRATEGIES, RealTokens, prefill_pods, router
from epp_sim.bench.workloads import WORKLOADS, Arrival, capacity
from epp_sim.ports import free_port
from epp_sim.stack.envoy import envoy_binary
from epp_sim.tiny_tokenizer import write_tiny_tokenizer
from epp_sim.waits import wait_until

__all__ = ["run_routing"]

_SCRAPE_INTERVAL = 0.05
_STATE = "slo-predictor.npz"
"""The SLO strategies' predictor state, shared by their runs (a warm replica's models and samples)."""
_TOKENIZER_VOCAB = 1000
"""Large enough that every word of :mod:`epp_sim.tiny_tokenizer` is one token."""


async def _one_run(
    options: RoutingOptions,
    workload: str,
    strategy: str,
    load: float,
    rate: float,
    arrivals: Sequence[Arrival],
    work: Path,
    replicas: int,
    tokenizer: Path | None,
) -> dict[str, Any]:
    port = free_port("127.0.0.2")
    tokens = None if tokenizer is None else RealTokens(tokenizer, free_port("127.0.0.2"))
    prefill = prefill_pods(strategy, options.servers)
    roles = [PREFILL] * prefill + [DECODE] * (options.servers - prefill) if prefill else []
    spec = WORKLOADS[workload]
    cluster = await start_cluster(
        servers=options.servers,
        time_scale=options.time_scale,
        port=port,
        work=work,
        tokens=tokens,
        num_gpu_blocks=spec.num_gpu_blocks,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        roles=roles,
        engine_port=free_port("127.0.0.2") if roles else 0,
    )
    store = pool_store(options.servers, port, roles)
    scrapers = ScraperManager(store, SystemClock(), EppMetrics(), interval=_SCRAPE_INTERVAL)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
    try:
        await scrapers.start()
        await wait_until(
            lambda: all(s.metrics.updated_at > 0 for s in store.endpoints()),
            timeout=10,
            interval=0.02,
            message="the scraper never read every simulator's /metrics",
        )
        async with router(
            strategy,
            store,
            options.seed,
            replicas=replicas,
            tokens=tokens,
            time_scale=options.time_scale,
            state=work / _STATE,
        ) as route:
            cpu_sim0, cpu_self0, wall0 = cpu_seconds(cluster.pid), time.process_time(), time.perf_counter()
            outcome, before = await replay(
                arrivals,
                route,
                session,
                options,
                lambda: server_counters(session, options.servers, port, roles),
            )
            wall = time.perf_counter() - wall0
            cpu_sim, cpu_self = cpu_seconds(cluster.pid) - cpu_sim0, time.process_time() - cpu_self0
        after = await server_counters(session, options.servers, port, roles)
    finally:
        await session.close()
        await scrapers.stop()
        await cluster.stop()
    record = run_record(
        workload=workload,
        strategy=strategy,
        replicas=replicas,
        load=load,
        rate=rate,
        arrivals=len(arrivals),
        outcome=outcome,
        counters=counters_since(before, after),
        time_scale=options.time_scale,
        prefill_pods=prefill,
        wall=wall,
        cpu={"simulators": cpu_sim, "picker_and_client": cpu_self},
    )
    if strategy in LEARNING:
        record["predictor"] = await predictor_quality(work / _STATE)
    return record


async def predictor_quality(state: Path) -> dict[str, Any]:
    """The SLO predictor as a run left it: its samples, and a model trained on them judged on the held-out ones."""
    predictor = EmbeddedPredictor(EmbeddedSettings(retrain_interval=3600, state_file=str(state)))
    try:
        await predictor.load()
        await predictor.train_now(force=True)
        stats = predictor.stats
        return {
            "samples": dict(stats.samples),
            "held_out": dict(stats.test_samples),
            "p90_error": {t: q.error for t, q in stats.quality.items()},
            "coverage": {t: q.coverage for t, q in stats.quality.items()},
        }
    finally:
        await predictor.aclose(save=False)


async def run_routing(options: RoutingOptions) -> dict[str, Any]:
    """Run every (workload, load, strategy) and return the JSON document."""
    started = time.monotonic()
    sim = bench_sim_config(options.time_scale)
    runs: list[dict[str, Any]] = []
    workloads_doc: dict[str, dict[str, Any]] = {}
    async with bench_work_dir("routing") as work:
        for name in options.workloads:
            workload = WORKLOADS[name]
            scaled = replace(options, time_scale=min(options.time_scale, workload.time_scale or options.time_scale))
            reference = workload.generate(50.0, 60.0, options.seed)
            cap = capacity(
                reference,
                servers=options.servers,
                prefill_time_per_token=sim.prefill_time_per_token,
                decode_time_per_seq=sim.decode_time_per_seq,
            )
            strategies, replica_counts = options.plan(name)
            workloads_doc[name] = {
                "description": workload.description,
                "capacity_rps": cap,
                "strategies": list(strategies),
                "replicas": list(replica_counts),
                "time_scale": scaled.time_scale,
                "num_gpu_blocks": workload.num_gpu_blocks or sim.num_gpu_blocks,
                "max_num_batched_tokens": workload.max_num_batched_tokens or sim.max_num_batched_tokens,
            }
            tokenizer = None
            if workload.real_tokens:
                tokenizer = write_tiny_tokenizer(work / "tokenizer", vocab_size=_TOKENIZER_VOCAB)
            for load in options.loads:
                rate = load * cap
                arrivals = workload.generate(rate, options.sim_seconds, options.seed)
                objectives = any(any(a.slo_ms) for a in arrivals)
                for replicas in replica_counts:
                    for strategy in strategies:
                        if strategy in LEARNING and not (work / _STATE).exists():
                            # A picker that has been serving: one unrecorded run trains the predictor first.
                            print(f"  {name:<14} load {load:4.2f} {strategy}: warm-up run (not recorded)", flush=True)
                            await _one_run(scaled, name, strategy, load, rate, arrivals, work, replicas, tokenizer)
                        run = await _one_run(scaled, name, strategy, load, rate, arrivals, work, replicas, tokenizer)
                        runs.append(run)
                        label = strategy if replicas == 1 else f"{strategy} ×{replicas}"
                        classes = run["classes"]
                        slo = "".join(
                            f"  {cls} SLO {classes[cls]['slo_attainment'] * 100:5.1f}%"
                            for cls in ("critical", "standard", "sheddable")
                            if objectives and cls in classes
                        )
                        print(
                            f"  {name:<14} load {load:4.2f} ({rate:5.1f}/s) {label:<15} "
                            f"ttft p90 {run['ttft_s']['p90']:7.3f}s  itl p90 {run['itl_s']['p90'] * 1e3:6.1f}ms  "
                            f"hit {run['prefix_hit_rate'] * 100:5.1f}%  "
                            f"shed {run['shed']:3d}  err {run['errors']:3d}  stretch {run['time_stretch']:.2f}{slo}",
                            flush=True,
                        )
    return {
        "benchmark": "routing",
        "machine": await machine_info(envoy_binary()),
        "options": {
            "servers": options.servers,
            "strategies": None if options.strategies is None else list(options.strategies),
            "replicas": None if options.replicas is None else list(options.replicas),
            "workloads": list(options.workloads),
            "loads": list(options.loads),
            "sim_seconds": options.sim_seconds,
            "warmup_fraction": options.warmup_fraction,
            "time_scale": options.time_scale,
            "drain_sim_seconds": options.drain_sim_seconds,
            "seed": options.seed,
            "scrape_interval_wall_s": _SCRAPE_INTERVAL,
            "sim_config": {
                "max_loras": sim.max_loras,
                "num_gpu_blocks": sim.num_gpu_blocks,
                "block_size": sim.block_size,
                "prefill_time_per_token": sim.prefill_time_per_token,
                "decode_time_base": sim.decode_time_base,
                "decode_time_per_seq": sim.decode_time_per_seq,
                "lora_load_time": sim.lora_load_time,
                "max_num_batched_tokens": sim.max_num_batched_tokens,
                "kv_transfer_latency": sim.kv_transfer_latency,
                "kv_transfer_time_per_token": sim.kv_transfer_time_per_token,
            },
            "strategy_configs": {
                k: v for k, v in STRATEGIES.items() if any(k in w["strategies"] for w in workloads_doc.values())
            },
        },
        "workloads": workloads_doc,
        "runs": runs,
        "targets": routing_targets(runs),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
