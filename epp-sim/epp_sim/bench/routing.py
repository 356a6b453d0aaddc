"""``epp bench routing``: how much better requests fare when the picker chooses, on a simulated cluster.

For each workload, offered load and strategy: a fresh simulated cluster (``epp_sim.bench.simcluster``,
N vLLM simulators in a child process, restarted so every strategy starts with cold caches), then
the picker in this process, as ``epp serve`` builds it: a ``Datastore`` holding the simulators as
endpoints, the production ``ScraperManager`` polling their ``/metrics`` every 50 ms, and a
``Director`` with the strategy's ``EndpointPickerConfig``. Every arrival of the seeded workload is
released at its (scaled) time, routed with ``director.route`` and sent straight to the chosen
simulator as a streaming chat completion, so the client sees TTFT, end-to-end latency and usage.

Strategies: ``round-robin`` (what a Kubernetes Service does: a tiny baseline here, no admission),
``random`` (``random-picker``), ``least-queue`` (``queue-scorer`` alone), ``legacy-v0.3``
(``legacy-filter-tree`` + ``random-picker``), ``default`` (the default profile) and
``prefix-aware`` (the default scorers with the prefix scorer weighted up).

Times are simulated seconds: wall-clock × ``time_scale``. The simulators' own numbers are used
where they are the truth (prefix-cache hits and queries); ``time_stretch`` compares the latency
the client measured with the one the simulators report, and says whether the simulated timeline
stayed honest (≈1.0) or the simulators fell behind for lack of CPU (> 1).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import os
import random
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from epp.clock import SystemClock
from epp.config.loader import LoadedConfig, load_config, load_default_config
from epp.datalayer.promtext import parse as parse_prom
from epp.datalayer.scraper import ScraperManager
from epp.datastore.store import Datastore
from epp.datastore.types import ObjectiveSpec, PodInfo, PoolSpec
from epp.errors import EppError
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import ApiKind, InferenceRequest
from epp.labels import Selector
from epp.plugins import register_in_tree
from epp.requestcontrol.director import PoolDirector
from epp.telemetry.metrics import EppMetrics
from epp_sim.bench.loadgen import percentile
from epp_sim.bench.procstat import cpu_seconds
from epp_sim.bench.report import machine_info
from epp_sim.bench.workloads import ADAPTERS, SHEDDABLE_OBJECTIVE, WORKLOADS, Arrival, capacity
from epp_sim.modelserver import SimConfig
from epp_sim.ports import free_port
from epp_sim.stack.envoy import envoy_binary
from epp_sim.stack.processes import ChildProcess

__all__ = ["STRATEGIES", "RoutingOptions", "bench_sim_config", "run_routing"]

log = logging.getLogger(__name__)

_HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
ROUND_ROBIN = "round-robin"
DEFAULT = "default"
STRATEGIES: dict[str, str | None] = {
    ROUND_ROBIN: None,
    "random": _HEADER + "plugins:\n- type: random-picker\n",
    "least-queue": _HEADER + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n",
    "legacy-v0.3": _HEADER + "plugins:\n- type: legacy-filter-tree\n- type: random-picker\n",
    DEFAULT: None,
    "prefix-aware": _HEADER
    + """plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: lora-affinity-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 5}
  - {pluginRef: lora-affinity-scorer, weight: 1}
  - pluginRef: max-score-picker
""",
}
"""Strategy name → EndpointPickerConfig (None: round robin's baseline, or the default profile)."""

_POOL_LABELS = {"app": "sim-bench"}
_COMPLETION_TOKENS = re.compile(rb'"completion_tokens":(\d+)')


def bench_sim_config(time_scale: float) -> SimConfig:
    """The simulated server: simulator defaults (an 8B-class model), 4 LoRA adapters in 2 slots,
    and a 4,096-block (65k-token) KV cache, so the tenants' system prompts outgrow one server."""
    return SimConfig(
        lora_modules={name: f"/adapters/{name}" for name in ADAPTERS},
        max_loras=2,
        num_gpu_blocks=4096,
        time_scale=time_scale,
    )


@dataclass(frozen=True)
class RoutingOptions:
    """What to run; ``quick()`` is the CI smoke-test shape."""

    servers: int = 8
    strategies: tuple[str, ...] = tuple(STRATEGIES)
    workloads: tuple[str, ...] = tuple(WORKLOADS)
    loads: tuple[float, ...] = (0.4, 0.7, 1.0, 1.3)
    sim_seconds: float = 16.0
    warmup_fraction: float = 0.25
    time_scale: float = 4.0
    drain_sim_seconds: float = 20.0
    seed: int = 1

    def __post_init__(self) -> None:
        unknown = [s for s in self.strategies if s not in STRATEGIES]
        if unknown or not self.strategies:
            raise ValueError(f"unknown strategies {unknown}; known: {list(STRATEGIES)}")
        unknown = [w for w in self.workloads if w not in WORKLOADS]
        if unknown or not self.workloads:
            raise ValueError(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
        if not 1 <= self.servers <= 200:
            raise ValueError(f"servers must be within 1..200, got {self.servers}")
        if not self.loads or min(self.loads) <= 0:
            raise ValueError(f"loads must be > 0, got {self.loads}")
        if self.sim_seconds <= 0 or self.time_scale <= 0 or self.drain_sim_seconds <= 0:
            raise ValueError("sim seconds, time scale and drain seconds must be > 0")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup fraction must be in [0, 1), got {self.warmup_fraction}")

    @classmethod
    def quick(cls, **overrides: Any) -> RoutingOptions:
        """Two servers, two strategies, one load, a few simulated seconds."""
        base: dict[str, Any] = {
            "servers": 2,
            "strategies": (ROUND_ROBIN, DEFAULT),
            "workloads": ("shared-prefix",),
            "loads": (0.5,),
            "sim_seconds": 3.0,
            "drain_sim_seconds": 20.0,
        }
        base.update(overrides)
        return cls(**base)


# --------------------------------------------------------------------------------- the picker


@dataclass
class _Picker:
    """Datastore + scrapers over the simulators, and a route function for one strategy."""

    store: Datastore
    scrapers: ScraperManager
    route: Callable[[int, Arrival], tuple[str, Callable[[], None]]]


def _store(servers: int, port: int) -> Datastore:
    store = Datastore()
    pods = [
        PodInfo(name=f"sim-{i}", namespace="default", ip=f"127.0.0.{2 + i}", labels=_POOL_LABELS, ready=True)
        for i in range(servers)
    ]
    selector = Selector.from_match_labels(_POOL_LABELS)
    store.set_pool(PoolSpec(name="sim", namespace="default", selector=selector, target_ports=(port,)), pods)
    store.set_objective(ObjectiveSpec(name=SHEDDABLE_OBJECTIVE, namespace="default", priority=-1))
    return store


def _config(strategy: str, seed: int, metrics: EppMetrics) -> LoadedConfig:
    registry = PluginRegistry()
    register_in_tree(registry)
    context = PluginContext(clock=SystemClock(), pool_name="sim", seed=seed)
    text = STRATEGIES[strategy]
    if text is None:
        return load_default_config(registry, context, metrics=metrics)
    return load_config(text, registry, context, metrics=metrics)


def _router(strategy: str, store: Datastore, seed: int) -> Callable[[int, Arrival], tuple[str, Callable[[], None]]]:
    if strategy == ROUND_ROBIN:
        turn = itertools.count()

        def round_robin(index: int, arrival: Arrival) -> tuple[str, Callable[[], None]]:
            endpoints = store.endpoints()
            return endpoints[next(turn) % len(endpoints)].endpoint.hostport, _nothing

        return round_robin
    metrics = EppMetrics()
    clock = SystemClock()
    config = _config(strategy, seed, metrics)
    director = PoolDirector(store, lambda: config, metrics, clock, random.Random(seed))

    def route(index: int, arrival: Arrival) -> tuple[str, Callable[[], None]]:
        request = InferenceRequest(
            request_id=str(index),
            model=arrival.model,
            api=ApiKind.CHAT_COMPLETIONS,
            stream=True,
            body=arrival.body,
            headers=arrival.headers,
            size=len(arrival.data),
        )
        decision = director.route(request, None)
        return decision.targets[0].endpoint.hostport, lambda: director.finished(request, decision, completed=True)

    return route


def _nothing() -> None:
    return None


# ------------------------------------------------------------------------------------ one run


@dataclass
class _Outcome:
    ttft: list[float] = field(default_factory=list)
    e2e: list[float] = field(default_factory=list)
    output_tokens: int = 0
    shed: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    route_seconds: float = 0.0
    routed: int = 0
    first_arrival: float = 0.0
    last_finish: float = 0.0
    arrivals: int = 0
    """Arrivals after the warm-up (the ones recorded)."""

    def error(self, kind: str) -> None:
        self.errors[kind] = self.errors.get(kind, 0) + 1


async def _send(
    session: aiohttp.ClientSession,
    picker: _Picker,
    index: int,
    arrival: Arrival,
    outcome: _Outcome | None,
) -> None:
    """Route and send one arrival; record it in ``outcome`` (None: a warm-up request, not recorded)."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    if outcome is None:
        outcome = _Outcome()  # a scratch record for warm-up traffic, thrown away
    try:
        destination, finished = picker.route(index, arrival)
    except EppError as e:
        if e.code.http_status == 429:
            outcome.shed += 1
        else:
            outcome.error(e.code.name.lower())
        return
    outcome.route_seconds += loop.time() - started
    outcome.routed += 1
    first: float | None = None
    tail = b""
    try:
        async with session.post(
            f"http://{destination}/v1/chat/completions",
            data=arrival.data,
            headers={"content-type": "application/json", **arrival.headers},
        ) as resp:
            if resp.status != 200:
                outcome.error(f"http_{resp.status}")
                await resp.read()
                return
            async for chunk in resp.content.iter_any():
                if first is None and b'"delta":{"content":' in chunk:
                    first = loop.time()
                tail = (tail + chunk)[-1024:]
    except aiohttp.ClientError as e:
        outcome.error(type(e).__name__)
        return
    finally:
        finished()
    end = loop.time()
    match = _COMPLETION_TOKENS.search(tail)
    if first is None or match is None:
        outcome.error("incomplete_stream")
        return
    outcome.ttft.append(first - started)
    outcome.e2e.append(end - started)
    outcome.output_tokens += int(match.group(1))
    outcome.last_finish = max(outcome.last_finish, end)


async def _replay(
    arrivals: Sequence[Arrival],
    picker: _Picker,
    session: aiohttp.ClientSession,
    options: RoutingOptions,
    snapshot: Callable[[], Coroutine[Any, Any, dict[str, Any]]],
) -> tuple[_Outcome, dict[str, Any]]:
    """Release each arrival at its scaled time; wait for all of them, at most ``drain`` after the last.

    Arrivals in the warm-up window are sent but not recorded; the simulators' counters are
    snapshotted when the first recorded arrival goes out, so hit rates cover the same window.
    """
    outcome = _Outcome()
    loop = asyncio.get_running_loop()
    start = loop.time()
    warmup = options.warmup_fraction * options.sim_seconds
    baseline: asyncio.Task[dict[str, Any]] | None = None
    tasks: set[asyncio.Task[None]] = set()
    try:
        for index, arrival in enumerate(arrivals):
            delay = start + arrival.at / options.time_scale - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            recorded = arrival.at >= warmup
            if recorded and baseline is None:
                baseline = loop.create_task(snapshot(), name="bench-counters-baseline")
                outcome.first_arrival = loop.time()
                outcome.arrivals = len(arrivals) - index
            task = loop.create_task(
                _send(session, picker, index, arrival, outcome if recorded else None), name=f"bench-request-{index}"
            )
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.wait(set(tasks), timeout=options.drain_sim_seconds / options.time_scale)
    finally:
        unfinished = list(tasks)
        for task in unfinished:
            task.cancel()
        await asyncio.gather(*unfinished, return_exceptions=True)
        before = await baseline if baseline is not None else {}
    if unfinished:
        outcome.errors["unfinished"] = len(unfinished)
    return outcome, before


def _quantiles(values: list[float], scale: float) -> dict[str, float]:
    values = sorted(v * scale for v in values)
    return {
        "p50": percentile(values, 50),
        "p90": percentile(values, 90),
        "p99": percentile(values, 99),
        "mean": sum(values) / len(values) if values else 0.0,
    }


async def _server_counters(session: aiohttp.ClientSession, servers: int, port: int) -> dict[str, Any]:
    """Prefix-cache counters, requests per server and the simulators' own end-to-end latency sum."""
    hits = queries = 0
    e2e_sum = e2e_count = 0.0
    per_server = []
    for i in range(servers):
        base = f"http://127.0.0.{2 + i}:{port}"
        async with session.get(f"{base}/_sim/stats") as resp:
            stats = await resp.json()
        hits += stats["prefix_cache_hits"]
        queries += stats["prefix_cache_queries"]
        per_server.append(stats["requests"])
        async with session.get(f"{base}/metrics") as resp:
            text = await resp.read()
        names = ["vllm:e2e_request_latency_seconds_sum", "vllm:e2e_request_latency_seconds_count"]
        samples = parse_prom(text, names).samples
        e2e_sum += sum(s.value for s in samples.get(names[0], []))
        e2e_count += sum(s.value for s in samples.get(names[1], []))
    return {
        "prefix_hits": hits,
        "prefix_queries": queries,
        "per_server_requests": per_server,
        "server_e2e_sum": e2e_sum,
        "server_e2e_count": e2e_count,
    }


async def _start_cluster(options: RoutingOptions, port: int, work: Path) -> ChildProcess:
    config = bench_sim_config(options.time_scale)
    fields = {
        "lora_modules": dict(config.lora_modules),
        "max_loras": config.max_loras,
        "num_gpu_blocks": config.num_gpu_blocks,
        "time_scale": config.time_scale,
    }
    child = ChildProcess(
        [
            sys.executable,
            "-m",
            "epp_sim.bench.simcluster",
            "--count",
            str(options.servers),
            "--port",
            str(port),
            "--config",
            json.dumps(fields),
        ],
        log_path=work / "simcluster.log",
        name="simcluster",
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    await child.start()
    last = f"http://127.0.0.{1 + options.servers}:{port}/health"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as probe:

        async def ready() -> bool:
            try:
                async with probe.get(last) as resp:
                    return resp.status == 200
            except (aiohttp.ClientError, TimeoutError):
                return False

        try:
            await child.wait_ready(ready, timeout=30)
        except BaseException:
            await child.stop()
            raise
    return child


async def _one_run(
    options: RoutingOptions,
    workload: str,
    strategy: str,
    load: float,
    rate: float,
    arrivals: Sequence[Arrival],
    work: Path,
) -> dict[str, Any]:
    port = free_port("127.0.0.2")
    cluster = await _start_cluster(options, port, work)
    store = _store(options.servers, port)
    scrapers = ScraperManager(store, SystemClock(), EppMetrics(), interval=0.05)
    connector = aiohttp.TCPConnector(limit=0, force_close=False)
    session = aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=None))
    try:
        await scrapers.start()
        deadline = time.monotonic() + 10
        while not all(s.metrics.updated_at > 0 for s in store.endpoints()):
            if time.monotonic() > deadline:
                raise TimeoutError("the scraper never read every simulator's /metrics")
            await asyncio.sleep(0.02)
        picker = _Picker(store, scrapers, _router(strategy, store, options.seed))
        cpu_sim0, cpu_self0, wall0 = cpu_seconds(cluster.pid), time.process_time(), time.perf_counter()
        outcome, before = await _replay(
            arrivals, picker, session, options, lambda: _server_counters(session, options.servers, port)
        )
        wall = time.perf_counter() - wall0
        cpu_sim, cpu_self = cpu_seconds(cluster.pid) - cpu_sim0, time.process_time() - cpu_self0
        after = await _server_counters(session, options.servers, port)
        counters = {k: v - before.get(k, 0) for k, v in after.items() if k != "per_server_requests"}
        counters["per_server_requests"] = after["per_server_requests"]
    finally:
        await session.close()
        await scrapers.stop()
        await cluster.stop()
    scale = options.time_scale
    completed = len(outcome.e2e)
    errors = sum(outcome.errors.values())
    span = (outcome.last_finish - outcome.first_arrival) * scale if completed else 0.0
    return {
        "workload": workload,
        "strategy": strategy,
        "load": load,
        "rate": rate,
        "arrivals": len(arrivals),
        "recorded": outcome.arrivals,
        "completed": completed,
        "shed": outcome.shed,
        "errors": errors,
        "error_kinds": outcome.errors,
        "shed_rate": outcome.shed / outcome.arrivals if outcome.arrivals else 0.0,
        "ttft_s": _quantiles(outcome.ttft, scale),
        "e2e_s": _quantiles(outcome.e2e, scale),
        "output_tokens_per_s": outcome.output_tokens / span if span else 0.0,
        "prefix_hit_rate": counters["prefix_hits"] / counters["prefix_queries"] if counters["prefix_queries"] else 0.0,
        "per_server_requests": counters["per_server_requests"],
        "time_stretch": _stretch(outcome.e2e, scale, counters),
        "route_us_mean": outcome.route_seconds / outcome.routed * 1e6 if outcome.routed else 0.0,
        "wall_s": wall,
        "cpu_cores": {"simulators": cpu_sim / wall, "picker_and_client": cpu_self / wall},
    }


def _stretch(e2e: Sequence[float], scale: float, counters: dict[str, Any]) -> float:
    """Client-measured mean end-to-end latency over the simulators' own mean: ≈1 when time stayed honest."""
    if not e2e or not counters["server_e2e_count"] or not counters["server_e2e_sum"]:
        return 0.0
    server_mean = counters["server_e2e_sum"] / counters["server_e2e_count"]
    return float(sum(e2e) / len(e2e) * scale / server_mean)


def _targets(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    def p90(workload: str, strategy: str, load: float) -> float | None:
        for r in runs:
            if (r["workload"], r["strategy"], r["load"]) == (workload, strategy, load):
                return float(r["ttft_s"]["p90"])
        return None

    cells = sorted({(r["workload"], r["load"]) for r in runs if r["load"] > 0.5})
    beats: list[str] = []
    ok: bool | None = None
    for workload, load in cells:
        rr, default = p90(workload, ROUND_ROBIN, load), p90(workload, DEFAULT, load)
        if rr is None or default is None:
            continue
        beats.append(f"{workload}@{load}: {default:.3f}s vs {rr:.3f}s")
        ok = (ok is not False) and default < rr
    ratios: list[str] = []
    prefix_ok: bool | None = None
    for workload, load in cells:
        if workload != "shared-prefix":
            continue
        rr, prefix = p90(workload, ROUND_ROBIN, load), p90(workload, "prefix-aware", load)
        if rr is None or prefix is None:
            continue
        ratio = rr / prefix if prefix > 0 else float("inf")
        ratios.append(f"@{load}: {ratio:.1f}×")
        prefix_ok = (prefix_ok is not False) and ratio >= 3.0
    return {
        "default_beats_round_robin_ttft_p90_above_50pct_load": {
            "detail": "; ".join(beats) or "not measured",
            "met": ok,
        },
        "prefix_aware_3x_round_robin_ttft_p90_shared_prefix": {
            "detail": ", ".join(ratios) or "not measured",
            "met": prefix_ok,
        },
    }


async def run_routing(options: RoutingOptions) -> dict[str, Any]:
    """Run every (workload, load, strategy) and return the JSON document."""
    started = time.monotonic()
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-bench-routing-"))
    sim = bench_sim_config(options.time_scale)
    runs: list[dict[str, Any]] = []
    workloads_doc = {}
    try:
        for name in options.workloads:
            workload = WORKLOADS[name]
            reference = workload.generate(50.0, 60.0, options.seed)
            cap = capacity(
                reference,
                servers=options.servers,
                prefill_time_per_token=sim.prefill_time_per_token,
                decode_time_per_seq=sim.decode_time_per_seq,
            )
            workloads_doc[name] = {"description": workload.description, "capacity_rps": cap}
            for load in options.loads:
                rate = load * cap
                arrivals = workload.generate(rate, options.sim_seconds, options.seed)
                for strategy in options.strategies:
                    run = await _one_run(options, name, strategy, load, rate, arrivals, work)
                    runs.append(run)
                    print(
                        f"  {name:<13} load {load:4.2f} ({rate:5.1f}/s) {strategy:<13} "
                        f"ttft p90 {run['ttft_s']['p90']:7.3f}s  hit {run['prefix_hit_rate'] * 100:5.1f}%  "
                        f"shed {run['shed']:3d}  err {run['errors']:3d}  stretch {run['time_stretch']:.2f}",
                        flush=True,
                    )
    except BaseException:
        print(f"routing benchmark failed; logs kept in {work}", file=sys.stderr)
        raise
    await asyncio.to_thread(shutil.rmtree, work, True)
    return {
        "benchmark": "routing",
        "machine": await machine_info(envoy_binary()),
        "options": {
            "servers": options.servers,
            "strategies": list(options.strategies),
            "workloads": list(options.workloads),
            "loads": list(options.loads),
            "sim_seconds": options.sim_seconds,
            "warmup_fraction": options.warmup_fraction,
            "time_scale": options.time_scale,
            "drain_sim_seconds": options.drain_sim_seconds,
            "seed": options.seed,
            "scrape_interval_wall_s": 0.05,
            "sim_config": {
                "max_loras": sim.max_loras,
                "num_gpu_blocks": sim.num_gpu_blocks,
                "block_size": sim.block_size,
                "prefill_time_per_token": sim.prefill_time_per_token,
                "decode_time_base": sim.decode_time_base,
                "decode_time_per_seq": sim.decode_time_per_seq,
                "lora_load_time": sim.lora_load_time,
            },
            "strategy_configs": {k: v for k, v in STRATEGIES.items() if k in options.strategies},
        },
        "workloads": workloads_doc,
        "runs": runs,
        "targets": _targets(runs),
        "elapsed_s": round(time.monotonic() - started, 1),
    }
