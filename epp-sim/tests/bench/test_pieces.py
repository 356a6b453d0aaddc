"""The benchmark's building blocks: backend and load generator on loopback, parsers, summaries."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
from pathlib import Path

import pytest

from epp.datalayer.promtext import parse
from epp_sim.bench.backend import MAX_PODS, pod_host, serve_backend
from epp_sim.bench.children import tcp_open
from epp_sim.bench.loadgen import http_load, percentile, unique_bodies
from epp_sim.bench.overhead import phase_overhead, prompt_body
from epp_sim.bench.overhead.phases import _quantile
from epp_sim.bench.procstat import cpu_seconds, read_proc
from epp_sim.bench.profiling import summarise
from epp_sim.bench.report import format_table
from epp_sim.bench.routing.scoring import routing_targets
from epp_sim.bench.scale import ScaleOptions, scale_prompt_body
from epp_sim.ports import free_port
from epp_sim.waits import wait_until


async def test_backend_serves_completions_chunked_bodies_and_vllm_metrics() -> None:
    port = free_port("127.0.0.2")
    stop = asyncio.Event()
    server = asyncio.create_task(serve_backend(["127.0.0.2", "127.0.0.3"], port, stop), name="test-backend")
    try:
        await wait_until(lambda: tcp_open("127.0.0.3", port), timeout=10)
        reader, writer = await asyncio.open_connection("127.0.0.3", port)
        # A chunked POST, then a GET /metrics on the same keep-alive connection.
        writer.write(
            b"POST /v1/completions HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n0\r\n\r\nGET /metrics HTTP/1.1\r\nhost: x\r\n\r\n"
        )
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        assert b'"usage"' in await reader.readexactly(length)
        head = await reader.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        page = await reader.readexactly(length)
        assert length > 30_000
        samples = parse(page, ["vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"]).samples
        assert samples["vllm:num_requests_waiting"] and samples["vllm:kv_cache_usage_perc"]
        writer.close()
        await writer.wait_closed()

        result = await http_load(
            "127.0.0.2", port, path="/v1/completions", body=prompt_body(1024), concurrency=4, duration=0.3, headers={}
        )
        assert result.requests > 50 and result.errors == 0
        assert 0 < result.p50 <= result.p90 <= result.p99
        assert result.rate > 0 and result.loadgen_cpu > 0
    finally:
        stop.set()
        await server


def test_prompt_body_is_valid_json_of_the_asked_size() -> None:
    import json

    for size in (100, 1024, 220 * 1024):
        body = prompt_body(size)
        assert abs(len(body) - size) <= 1
        assert json.loads(body)["prompt"]


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 50) == 50.0
    assert percentile(values, 99) == 99.0
    assert percentile(values, 100) == 100.0
    assert percentile([], 50) == 0.0


def _overhead_text(counts: dict[float, int], total: float) -> str:
    lines = [
        f'epp_picker_overhead_seconds_bucket{{le="{le}",phase="total"}} {c}'
        for le, c in sorted(counts.items(), key=lambda kv: kv[0])
    ]
    n = max(counts.values())
    lines += [
        f'epp_picker_overhead_seconds_count{{phase="total"}} {n}',
        f'epp_picker_overhead_seconds_sum{{phase="total"}} {total}',
    ]
    return "\n".join(lines).replace('le="inf"', 'le="+Inf"') + "\n"


def test_phase_overhead_is_the_difference_between_two_scrapes() -> None:
    before = _overhead_text({0.001: 10, 0.002: 10, float("inf"): 10}, 0.005)
    # 100 new observations, all between 1 ms and 2 ms, summing to 0.15 s.
    after = _overhead_text({0.001: 10, 0.002: 110, float("inf"): 110}, 0.155)
    phases = phase_overhead(before, after)
    assert phases["total"]["count"] == 100
    assert phases["total"]["mean_us"] == pytest.approx(1500)
    assert 1000 < phases["total"]["p50_us"] < 2000
    assert _quantile([(0.001, 0.0), (float("inf"), 0.0)], 0.5) == 0.0


def test_profile_summary_self_and_inclusive_shares() -> None:
    raw = "main (a.py);run (b.py);parse (/x/epp/c.py) 30\nmain (a.py);run (b.py) 10\nbad line\n"
    summary = summarise(raw)
    assert summary.samples == 40
    assert summary.top_self[0] == ("parse (epp/c.py)", 0.75)
    assert dict(summary.top_inclusive)["run (b.py)"] == 1.0


def test_format_table_aligns_columns() -> None:
    text = format_table(["a", "long"], [[1, "x"], ["wide cell", 2.5]])
    lines = text.splitlines()
    assert len({len(line) for line in lines}) == 1
    assert lines[1].startswith("-")


def test_procstat_reads_this_process() -> None:
    sample = read_proc(os.getpid())
    assert sample.cpu > 0 and sample.rss > 10 * 2**20
    with pytest.raises(ProcessLookupError):
        cpu_seconds(2**22 + 12345)


@pytest.mark.parametrize(
    ("cells", "met"),
    [
        (
            {(0.7, "least-queue"): 1.0, (0.7, "in-flight"): 1.0, (1.0, "least-queue"): 5.0, (1.0, "in-flight"): 4.0},
            True,
        ),
        (
            {(0.7, "least-queue"): 1.0, (0.7, "in-flight"): 1.1, (1.0, "least-queue"): 5.0, (1.0, "in-flight"): 2.0},
            False,
        ),
        (
            {(0.7, "least-queue"): 1.0, (0.7, "in-flight"): 0.9, (1.0, "least-queue"): 5.0, (1.0, "in-flight"): 4.1},
            False,
        ),
        ({(0.7, "least-queue"): 1.0, (0.7, "in-flight"): 0.9}, None),
        ({}, None),
    ],
    ids=["met", "worse-at-0.7", "under-20pct-at-1.0", "1.0-not-measured", "not-measured"],
)
def test_in_flight_target_no_worse_anywhere_and_20pct_better_at_full_load(
    cells: dict[tuple[float, str], float], met: bool | None
) -> None:
    runs = [
        {"workload": "bursty", "strategy": strategy, "load": load, "replicas": 1, "ttft_s": {"p90": p90}}
        for (load, strategy), p90 in cells.items()
    ]
    target = routing_targets(runs)["in_flight_vs_queue_only_bursty_no_worse_and_20pct_better_at_1.0"]
    assert target["met"] is met
    if (1.0, "in-flight") in cells:
        assert "@1.0: " in target["detail"] and "vs 5.000s" in target["detail"]


@pytest.mark.parametrize(
    ("rates", "met"),
    [
        ({("approximate", 1): 0.40, ("approximate-valkey", 2): 0.39, ("approximate-valkey", 3): 0.41}, True),
        ({("approximate", 1): 0.40, ("approximate-valkey", 2): 0.37, ("approximate-valkey", 3): 0.41}, False),
        ({("approximate", 1): 0.40, ("approximate", 2): 0.30}, None),
    ],
    ids=["met", "two-replicas-3-points-below", "not-measured"],
)
def test_shared_state_target_holds_the_hit_rate_within_2_points(
    rates: dict[tuple[str, int], float], met: bool | None
) -> None:
    runs = [
        {"workload": "cache-pressure", "strategy": strategy, "load": 0.5, "replicas": n, "prefix_hit_rate": rate}
        for (strategy, n), rate in rates.items()
    ]
    target = routing_targets(runs)["approximate_valkey_replicas_hit_rate_within_2_points"]
    assert target["met"] is met
    if met is not None:
        assert target["detail"].startswith("×2@0.5: 40.0% → ")


def test_pod_hosts_are_distinct_loopback_host_addresses_past_254() -> None:
    hosts = [pod_host(i) for i in range(MAX_PODS)]
    assert hosts[:2] == ["127.0.0.2", "127.0.0.3"] and hosts[252] == "127.0.0.254" and hosts[253] == "127.0.1.1"
    assert len(set(hosts)) == MAX_PODS
    assert all(h.startswith("127.") and 1 <= int(h.rsplit(".", 1)[1]) <= 254 for h in hosts)
    with pytest.raises(ValueError, match="outside"):
        pod_host(MAX_PODS)


def test_unique_bodies_end_differently_and_stay_json() -> None:
    body = scale_prompt_body(4)
    assert abs(len(body) - 4096) < 64
    first, second = itertools.islice(unique_bodies(body, "r1"), 2)
    assert first != second and first.endswith(b' #r1-1"}') and second.endswith(b' #r1-2"}')
    assert json.loads(first)["prompt"].startswith(json.loads(body)["prompt"])


def test_scale_options_are_checked_when_built() -> None:
    with pytest.raises(ValueError, match="base-pods"):
        ScaleOptions(pods=(8,), base_pods=8)
    with pytest.raises(ValueError, match="configs must include default"):
        ScaleOptions(configs=("precise",))
    with pytest.raises(ValueError, match="no tokenizer.json"):
        ScaleOptions(tokenizer=Path("/nonexistent"))
