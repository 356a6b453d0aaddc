"""The routing benchmark's P/D path: topologies, a disaggregated cluster routed and replayed, the P/D targets.

The cluster test runs the real pieces `epp bench routing --workloads pd-mix` runs (the simulated
cluster child with prefill pods and sidecars in front of decode pods, the scraper, the P/D
strategy's pipeline, the replay), on two servers and a few arrivals: every request completes,
the long prompts are prefilled on the prefill pod and their KV pulled by the decode pod, and the
client records inter-token gaps and times per output token. No timing is asserted.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from epp.clock import SystemClock
from epp.datalayer.scraper import ScraperManager
from epp.telemetry.metrics import EppMetrics
from epp_sim.bench.routing import RoutingOptions
from epp_sim.bench.routing.cluster import pool_store, server_counters, start_cluster
from epp_sim.bench.routing.replay import replay
from epp_sim.bench.routing.scoring import routing_targets
from epp_sim.bench.routing.strategies import AGGREGATED, PD_NON_CACHED_TOKENS, prefill_pods, router
from epp_sim.bench.workloads import WORKLOADS
from epp_sim.ports import free_port
from epp_sim.waits import wait_until


def test_a_pd_strategy_names_its_share_of_prefill_pods() -> None:
    assert prefill_pods("pd-4p4d", 8) == 4 and prefill_pods("pd-6p2d", 8) == 6
    assert prefill_pods("pd-4p4d", 2) == 1 and prefill_pods("pd-6p2d", 2) == 1  # one of each role at least
    assert prefill_pods("pd-6p2d", 3) == 2
    assert prefill_pods(AGGREGATED, 8) == 0 and prefill_pods("round-robin", 8) == 0
    with pytest.raises(ValueError, match="at least 2 servers"):
        prefill_pods("pd-4p4d", 1)
    with pytest.raises(ValueError, match="at least 2 servers"):
        RoutingOptions(servers=1, workloads=("pd-mix",))


def _cell(strategy: str, load: float, itl: tuple[float, float], ttft: float, prefill: int) -> dict[str, Any]:
    return {
        "workload": "pd-mix",
        "strategy": strategy,
        "load": load,
        "replicas": 1,
        "prefill_pods": prefill,
        "itl_s": {"p50": itl[0], "p90": itl[1]},
        "ttft_s": {"p90": ttft},
    }


@pytest.mark.parametrize(
    ("pd_itl_p90", "pd_ttft_low", "itl_met", "ttft_met"),
    [(0.020, 0.50, True, True), (0.060, 0.50, False, True), (0.020, 0.60, True, False)],
    ids=["both-met", "itl-under-30pct", "ttft-over-10pct"],
)
def test_pd_targets_judge_itl_where_aggregated_interferes_and_ttft_at_the_lowest_load(
    pd_itl_p90: float, pd_ttft_low: float, itl_met: bool, ttft_met: bool
) -> None:
    runs = [
        _cell(AGGREGATED, 0.2, (0.011, 0.012), 0.50, 0),  # no interference: p90 ≈ p50
        _cell("pd-4p4d", 0.2, (0.011, 0.030), pd_ttft_low, 4),  # worse here, but not judged on ITL
        _cell(AGGREGATED, 0.65, (0.012, 0.077), 0.61, 0),  # prefill chunks stretch the tail
        _cell("pd-4p4d", 0.65, (0.012, pd_itl_p90), 3.9, 4),
    ]
    targets = routing_targets(runs)
    itl = targets["pd_itl_p90_30pct_better_where_aggregated_interferes"]
    assert itl["met"] is itl_met
    assert "@0.2: 30.0ms vs 12.0ms (-150%, no interference)" in itl["detail"]
    assert targets["pd_ttft_p90_within_10pct_at_lowest_load"]["met"] is ttft_met
    assert "pd_itl_p90_30pct_better_where_aggregated_interferes" not in routing_targets(runs[:1])


@pytest.mark.timeout(120)
async def test_a_disaggregated_cluster_prefills_long_prompts_remotely_and_records_token_gaps(tmp_path: Path) -> None:
    options = RoutingOptions(servers=2, workloads=("pd-mix",), loads=(0.2,), sim_seconds=2.0, time_scale=2.0)
    options = dataclasses.replace(options, warmup_fraction=0.0)
    spec = WORKLOADS["pd-mix"]
    arrivals = spec.generate(3.0, options.sim_seconds, options.seed)
    assert any(a.prompt_tokens >= PD_NON_CACHED_TOKENS for a in arrivals)
    assert all(a.slo_ms == (1000.0, 50.0) for a in arrivals)  # its objectives, judged per request
    roles = ["prefill", "decode"]
    port, engine_port = free_port("127.0.0.2"), free_port("127.0.0.2")
    cluster = await start_cluster(
        servers=2,
        time_scale=options.time_scale,
        port=port,
        work=tmp_path,
        num_gpu_blocks=spec.num_gpu_blocks,
        max_num_batched_tokens=spec.max_num_batched_tokens,
        roles=roles,
        engine_port=engine_port,
    )
    store = pool_store(2, port, roles)
    scrapers = ScraperManager(store, SystemClock(), EppMetrics(), interval=0.05)
    try:
        await scrapers.start()
        await wait_until(lambda: all(s.metrics.updated_at > 0 for s in store.endpoints()), timeout=10)
        async with aiohttp.ClientSession() as session, router("pd-4p4d", store, options.seed) as route:
            outcome, before = await replay(
                arrivals, route, session, options, lambda: server_counters(session, 2, port, roles)
            )
            after = await server_counters(session, 2, port, roles)
    finally:
        await scrapers.stop()
        await cluster.stop()
    assert outcome.errors == {} and outcome.shed == 0
    assert len(outcome.e2e) == len(arrivals)
    long = sum(a.prompt_tokens >= PD_NON_CACHED_TOKENS for a in arrivals)
    assert after["remote_prefills"] == long  # each long prompt decoded with KV pulled from the prefill pod
    prefill_requests, decode_requests = after["per_server_requests"]
    assert prefill_requests == long and decode_requests == len(arrivals)  # every request decoded on the decode pod
    standard = outcome.classes["standard"]  # pd-mix names no objective class: every request is standard
    assert standard.served == len(arrivals) and 0 <= standard.met <= standard.served
    assert len(standard.tpot) == len(arrivals) and all(t > 0 for t in standard.tpot)
    assert len(outcome.itl) >= sum(a.max_tokens - 2 for a in arrivals) // 2  # gaps between streamed tokens
    assert before == {} or before["remote_prefills"] == 0
