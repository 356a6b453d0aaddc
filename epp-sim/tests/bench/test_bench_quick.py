"""``epp bench overhead|routing|scale --quick`` end to end, as CI runs them: every field there, values sane.

No timing assertions: the numbers of a quick run mean nothing; what must hold is that every
process started, every variant answered, and the JSON carries what the docs promise.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from epp_sim.bench.routing.options import RoutingOptions
from epp_sim.bench.routing.run import run_routing


async def _run_bench(kind: str, out: Path) -> dict[str, Any]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "epp",
        "bench",
        kind,
        "--quick",
        "--out",
        str(out),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        start_new_session=True,
    )
    output, _ = await proc.communicate()
    text = output.decode(errors="replace")
    assert proc.returncode == 0, text[-4000:]
    assert "targets:" in text and "machine:" in text
    doc: dict[str, Any] = json.loads((out / f"{kind}.json").read_text())
    if kind != "scale":  # scale writes no plot
        assert (out / f"{kind}.png").stat().st_size > 10_000
    return doc


@pytest.mark.timeout(90)
async def test_overhead_quick(tmp_path: Path) -> None:
    doc = await _run_bench("overhead", tmp_path)
    machine = doc["machine"]
    assert machine["cpus"] >= 1 and machine["envoy"] and machine["python"]
    assert doc["options"]["http_loadgen"] in ("wrk", "python-http")
    assert doc["options"]["grpc_loadgen"] in ("h2load", "python-grpc")
    cells = doc["http"]
    assert {c["variant"] for c in cells} == {"envoy", "noop", "epp"}
    for c in cells:
        assert c["requests"] > 0 and c["errors"] == 0, c
        assert c["rps"] > 0 and 0 < c["p50_ms"] <= c["p90_ms"] <= c["p99_ms"]
        assert c["cpu_cores"]["envoy"] > 0 and c["cpu_cores"]["backend"] > 0
        assert c["cpu_us_per_request"]["envoy"] > 0
        assert c["rps_vs_noop"] > 0 and c["rps_vs_envoy"] > 0
        if c["variant"] != "envoy":
            assert c["cpu_cores"]["processor"] > 0
    phases = doc["picker_phases"][0]["phases"]
    assert set(phases) == {"parse", "schedule", "respond", "total"}
    epp_requests = next(c["requests"] for c in cells if c["variant"] == "epp")
    assert phases["total"]["count"] >= epp_requests
    assert 0 < phases["schedule"]["mean_us"] < phases["total"]["mean_us"]
    direct = {g["variant"]: g for g in doc["grpc_direct"]}
    assert set(direct) == {"noop", "epp"}
    assert all(g["streams_per_s"] > 0 and g["errors"] == 0 for g in direct.values())
    scrape = doc["scrape"][0]
    assert scrape["endpoints"] == 2 and scrape["errors"] == 0 and scrape["endpoints_with_metrics"] == 2
    assert 0 < scrape["cpu_per_s"] < 2 and scrape["scrapes_per_s"] > 10
    assert doc["rss_mib"]["epp"] > 20
    soak = doc["soak"]["pairs"]
    assert set(soak) == {"noop/stock", "epp/stock", "noop/graceful", "epp/graceful"}
    for name, pair in soak.items():
        assert pair["requests"] > 0 and len(pair["samples"]) >= 2 and pair["rss_last_mib"] > 10, name
        assert pair["samples"][-1][0] == pair["requests"]
    assert set(doc["targets"]) >= {
        "throughput_vs_noop_1kb_c16_ge_0.90",
        "throughput_vs_noop_220kb_c4_ge_0.85",
        "added_p50_1kb_c1_le_0.5ms",
        "scrape_8_endpoints_lt_0.10_core",
        "rss_slope_stock_envoy_le_10_bytes_per_request",
    }


@pytest.mark.timeout(90)
async def test_routing_quick(tmp_path: Path) -> None:
    doc = await _run_bench("routing", tmp_path)
    runs = doc["runs"]
    assert {r["strategy"] for r in runs} == {"round-robin", "default"}
    assert doc["workloads"]["shared-prefix"]["capacity_rps"] > 0
    arrivals = {r["arrivals"] for r in runs}
    assert len(arrivals) == 1  # every strategy got the same arrivals
    for r in runs:
        assert r["errors"] == 0 and r["shed"] == 0, r
        assert r["completed"] == r["recorded"] > 0
        assert 0 < r["ttft_s"]["p50"] <= r["ttft_s"]["p90"] <= r["ttft_s"]["p99"]
        assert r["ttft_s"]["p50"] < r["e2e_s"]["p50"]
        assert r["output_tokens_per_s"] > 0
        assert 0 <= r["prefix_hit_rate"] <= 1
        assert r["time_stretch"] > 0  # how far a loaded machine stretched simulated time: reported, not judged
        assert sum(r["per_server_requests"]) == r["arrivals"]
    rr = next(r for r in runs if r["strategy"] == "round-robin")
    assert max(rr["per_server_requests"]) - min(rr["per_server_requests"]) <= 1
    assert set(doc["targets"]) == {
        "default_beats_round_robin_ttft_p90_above_50pct_load",
        "prefix_aware_3x_round_robin_ttft_p90_shared_prefix",
        "in_flight_vs_queue_only_bursty_no_worse_and_20pct_better_at_1.0",
        "precise_ttft_p90_le_half_approximate_cache_pressure",
        "precise_two_replicas_hit_rate_within_2_points",
        "approximate_two_replicas_hit_rate_drops_5_points",
        "approximate_valkey_replicas_hit_rate_within_2_points",
    }


async def test_scale_quick(tmp_path: Path) -> None:
    doc = await _run_bench("scale", tmp_path)
    assert doc["options"]["pods"] == [12] and doc["options"]["base_pods"] == 2
    modes = ["in-loop", "process"]
    assert [(i["mode"], i["pods"]) for i in doc["idle"]] == [(m, n) for n in (2, 12) for m in modes]
    for idle in doc["idle"]:
        # Every pod fetched, none failed; how often and how fresh depends on the machine's load, so
        # only what holds on any machine is asserted: never faster than the 50 ms interval.
        assert idle["fetches_per_pod_per_s"] > 0 and idle["errors"] == 0
        # /proc counts CPU in 10 ms ticks: a serving process that leaves scraping to its worker may
        # use less than one tick in the quick run's 1 s idle window, so 0 is a true measurement.
        assert idle["cpu_cores"] > 0 and idle["metrics_age_max_ms"] > 0
        assert 0 <= idle["serving_process_cores"] <= idle["cpu_cores"]
        assert idle["achieved_interval_ms"] >= 45
    assert [(lat["mode"], lat["pods"]) for lat in doc["latency"]] == [(m, 12) for m in modes]
    for latency in doc["latency"]:
        for side in ("with", "without"):
            assert latency[side]["requests"] > 0 and latency[side]["errors"] == 0
    cells = {(c["config"], c["prompt_kib"]): c for c in doc["cpu_per_request"]}
    assert set(cells) == {("default", 4), ("precise", 4)}
    assert cells[("default", 4)]["picker"] == "in-loop"
    for cell in cells.values():
        assert cell["requests"] > 0 and cell["errors"] == 0 and cell["picker_cpu_ms_per_request"] > 0
    assert set(doc["targets"]) == {
        *(f"idle_{n}_pods_{m}_le_{c}_core_at_15_fetches" for m in modes for n, c in ((100, 0.25), (400, 1.0))),
        *(f"added_p50_c1_12_pods_{m}_le_0.5ms" for m in modes),
        "default_400kib_le_3ms_cpu_per_request",
        "precise_400kib_le_60ms_cpu_per_request",
        "precise_4kib_two_workers_ge_1.7x_one",
    }
    assert doc["targets"]["idle_100_pods_process_le_0.25_core_at_15_fetches"]["met"] is None
    # The precise picker with one and with two serving processes, on the same load.
    workers = {c["workers"]: c for c in doc["workers"]}
    assert set(workers) == {1, 2} and workers[1]["throughput_vs_one_worker"] == 1.0
    for cell in workers.values():
        assert cell["requests"] > 0 and cell["errors"] == 0 and cell["picker_cpu_ms_per_request"] > 0
    assert workers[2]["picker"] == "precise-w2" and workers[2]["throughput_vs_one_worker"] > 0


@pytest.mark.timeout(120)
async def test_routing_slo_workload_records_classes_and_the_predictor(tmp_path: Path) -> None:
    """The slo workload in the quick shape: per-class SLO attainment, SLO goodput, and (after the SLO
    strategy's unrecorded warm-up run) the predictor's samples and held-out quality."""
    options = RoutingOptions.quick(workloads=("slo",), strategies=("default", "slo"))
    doc = await run_routing(options)
    runs = {r["strategy"]: r for r in doc["runs"]}
    assert set(runs) == {"default", "slo"}
    for run in runs.values():
        classes = run["classes"]
        assert set(classes) == {"critical", "sheddable"}
        for counts in classes.values():
            assert 0 <= counts["slo_attainment"] <= 1 and counts["met"] <= counts["served"]
        assert run["slo_goodput_rps"] <= run["goodput_rps"]
    predictor = runs["slo"]["predictor"]
    assert predictor["samples"]["ttft"] > 0 and predictor["samples"]["tpot"] > 0
    assert "predictor" not in runs["default"]
