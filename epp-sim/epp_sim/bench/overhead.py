"""``epp bench overhead``: what the picker costs per request, against Envoy alone and a no-op processor.

Everything runs on loopback as separate processes, started and stopped by PID:

- a fast backend (``epp_sim.bench.backend``) on ``127.0.0.2`` … ``127.0.0.<N+1>``, serving completions
  and a realistic vLLM ``/metrics`` page on each address (the N "pods");
- a fake Kubernetes API server (in this process) holding N Ready pods with those IPs;
- the no-op ext_proc server (``epp_sim.bench.noop_server``) routing everything to the first pod;
- ``epp serve`` in standalone mode over the N pods, scraping them every 50 ms;
- three Envoys: (a) ``envoy`` straight to the first pod, (b) ``noop`` with the ext_proc filter
  to the no-op processor, (c) ``epp`` with the same filter to the picker (the GIE mode:
  full-duplex streamed bodies, routing by ``envoy.lb`` metadata).

For each prompt size and concurrency, rounds of (a, b, c, a, b, c, …) of a few seconds each run a
closed-loop load (``wrk`` if installed, else ``epp_sim.bench.loadgen``), so machine noise hits every
variant alike. Per variant: requests/s, p50/p90/p99 (median over rounds), CPU of every process
(``/proc/<pid>/stat``) and CPU µs per request; per cell the ratios c/b and c/a and the p50 the
picker adds. Then: ext_proc streams/s straight to each processor (no Envoy), the picker's own
per-phase histogram (``epp_picker_overhead_seconds`` from its ``/metrics``), the scraper's CPU
alone at several endpoint counts, optionally a py-spy profile of the picker and a soak that
samples its RSS.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from epp.datalayer.promtext import parse
from epp_sim.apiserver.fixture import RunningApiServer, running_apiserver
from epp_sim.bench.loadgen import LoadResult
from epp_sim.bench.loadtools import LoadGenerator, ToolChoice
from epp_sim.bench.procstat import cpu_seconds, rss_bytes
from epp_sim.bench.profiling import record
from epp_sim.bench.report import machine_info
from epp_sim.ports import free_port
from epp_sim.stack.envoy import EnvoyProcess, envoy_binary
from epp_sim.stack.envoy_config import ExtProcTarget, envoy_bootstrap, envoy_bootstrap_plain
from epp_sim.stack.processes import ChildProcess

__all__ = ["OverheadOptions", "Stack", "run_overhead"]

log = logging.getLogger(__name__)

VARIANTS = ("envoy", "noop", "epp")
_POOL_LABELS = {"app": "epp-bench"}
_PHASES = ("parse", "schedule", "respond", "total")


@dataclass(frozen=True)
class OverheadOptions:
    """What to measure; ``quick()`` is the CI smoke-test shape."""

    endpoints: int = 8
    concurrencies: tuple[int, ...] = (1, 16, 64)
    prompt_bytes: tuple[int, ...] = (1024, 220 * 1024)
    rounds: int = 3
    round_seconds: float = 2.0
    grpc_concurrency: int = 16
    scrape_endpoints: tuple[int, ...] = (8, 64)
    scrape_seconds: float = 3.0
    loadgen: ToolChoice = "auto"
    profile_seconds: float = 0.0
    soak_seconds: float = 0.0
    soak_sample_seconds: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.endpoints <= 200 or any(not 1 <= n <= 200 for n in self.scrape_endpoints):
            raise ValueError("endpoint counts must be within 1..200 (127.0.0.2 … 127.0.0.201)")
        if not self.concurrencies or min(self.concurrencies) < 1 or self.grpc_concurrency < 1:
            raise ValueError(f"concurrencies must be >= 1, got {self.concurrencies}")
        if not self.prompt_bytes or min(self.prompt_bytes) < 64:
            raise ValueError(f"prompt sizes must be >= 64 bytes, got {self.prompt_bytes}")
        if self.rounds < 1 or self.round_seconds <= 0:
            raise ValueError("rounds must be >= 1 and round seconds > 0")
        if self.profile_seconds < 0 or self.soak_seconds < 0:
            raise ValueError("profile and soak seconds must be >= 0")

    @classmethod
    def quick(cls, **overrides: Any) -> OverheadOptions:
        """One concurrency, one small prompt, one 1-second round: proves the pipeline, not the numbers."""
        base: dict[str, Any] = {
            "endpoints": 2,
            "concurrencies": (4,),
            "prompt_bytes": (1024,),
            "rounds": 1,
            "round_seconds": 1.0,
            "grpc_concurrency": 4,
            "scrape_endpoints": (2,),
            "scrape_seconds": 1.0,
        }
        base.update(overrides)
        return cls(**base)


def prompt_body(size: int) -> bytes:
    """An OpenAI completions body of about ``size`` bytes (deterministic text)."""
    head, tail = b'{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":1,"prompt":"', b'"}'
    words = b"the quick brown fox jumps over the lazy dog "
    filler = (words * (size // len(words) + 1))[: max(1, size - len(head) - len(tail))]
    return head + filler + tail


# ------------------------------------------------------------------------------------ the stack


async def _http_ok(session: aiohttp.ClientSession, url: str, body: bytes | None = None) -> bool:
    try:
        if body is None:
            async with session.get(url) as resp:
                await resp.read()
                return resp.status == 200
        async with session.post(url, data=body, headers={"content-type": "application/json"}) as resp:
            await resp.read()
            return resp.status == 200
    except (aiohttp.ClientError, TimeoutError):
        return False


async def _tcp_open(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.open_connection(host, port)
    except OSError:
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True


def _add_pods(running: RunningApiServer, count: int) -> None:
    store = running.server.store
    for i in range(count):
        name = f"bench-{i}"
        store.create(
            "Pod",
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": "default", "labels": dict(_POOL_LABELS)},
                "spec": {"containers": [{"name": "server", "image": "vllm"}]},
            },
            namespace="default",
        )
        status = {
            "phase": "Running",
            "podIP": f"127.0.0.{2 + i}",
            "conditions": [{"type": "Ready", "status": "True"}],
        }
        store.patch("Pod", name, {"status": status}, namespace="default", subresource="status")


@dataclass
class Stack:
    """The running processes and where they listen."""

    work: Path
    backend_port: int
    backend: ChildProcess
    noop: ChildProcess
    epp: ChildProcess
    epp_grpc: str
    noop_grpc: str
    epp_metrics_url: str
    envoys: dict[str, EnvoyProcess] = field(default_factory=dict)

    def pids(self, variant: str) -> dict[str, int]:
        """The processes whose CPU a round of ``variant`` is charged with."""
        pids = {"envoy": self.envoys[variant].pid, "backend": self.backend.pid}
        if variant == "noop":
            pids["processor"] = self.noop.pid
        elif variant == "epp":
            pids["processor"] = self.epp.pid
        return pids


def _python_child(work: Path, name: str, *args: str) -> ChildProcess:
    env = dict(os.environ, NAMESPACE="default", PYTHONUNBUFFERED="1")
    return ChildProcess([sys.executable, "-m", *args], log_path=work / f"{name}.log", name=name, env=env)


@asynccontextmanager
async def start_stack(options: OverheadOptions, work: Path) -> AsyncIterator[Stack]:
    """Start backend, API server, processors and the three Envoys; stop them all on exit."""
    hosts = max(options.endpoints, *options.scrape_endpoints)
    async with AsyncExitStack() as stack:
        session = await stack.enter_async_context(aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)))
        port = free_port("127.0.0.2")
        backend = _python_child(work, "backend", "epp_sim.bench.backend", "--count", str(hosts), "--port", str(port))
        await stack.enter_async_context(backend)
        await backend.wait_ready(lambda: _http_ok(session, f"http://127.0.0.2:{port}/health"), timeout=30)

        running = await stack.enter_async_context(running_apiserver(kubeconfig_path=work / "kubeconfig"))
        _add_pods(running, options.endpoints)

        noop_port = free_port()
        noop = _python_child(
            work, "noop", "epp_sim.bench.noop_server", "--port", str(noop_port), "--destination", f"127.0.0.2:{port}"
        )
        await stack.enter_async_context(noop)
        await noop.wait_ready(lambda: _tcp_open("127.0.0.1", noop_port), timeout=30)

        grpc, health, metrics = free_port(), free_port(), free_port()
        selector = ",".join(f"{k}={v}" for k, v in _POOL_LABELS.items())
        epp = _python_child(
            work,
            "epp",
            "epp",
            "serve",
            "--secure-serving=false",
            f"--endpoint-selector={selector}",
            f"--endpoint-target-ports={port}",
            f"--kubeconfig={running.kubeconfig}",
            "--bind-address=127.0.0.1",
            f"--grpc-port={grpc}",
            f"--grpc-health-port={health}",
            f"--metrics-port={metrics}",
            "--v=1",
        )
        await stack.enter_async_context(epp)
        metrics_url = f"http://127.0.0.1:{metrics}/metrics"
        await epp.wait_ready(lambda: _http_ok(session, metrics_url), timeout=60)

        result = Stack(
            work=work,
            backend_port=port,
            backend=backend,
            noop=noop,
            epp=epp,
            epp_grpc=f"127.0.0.1:{grpc}",
            noop_grpc=f"127.0.0.1:{noop_port}",
            epp_metrics_url=metrics_url,
        )
        bootstraps = {
            "envoy": envoy_bootstrap_plain(0, "127.0.0.2", port, 0),
            "noop": envoy_bootstrap(listen_port=0, ext_proc=ExtProcTarget("127.0.0.1", noop_port), admin_port=0),
            "epp": envoy_bootstrap(listen_port=0, ext_proc=ExtProcTarget("127.0.0.1", grpc), admin_port=0),
        }
        for name, bootstrap in bootstraps.items():
            envoy = EnvoyProcess(bootstrap, name=f"envoy-{name}", work_dir=work / f"envoy-{name}")
            result.envoys[name] = await stack.enter_async_context(envoy)
        body = prompt_body(1024)
        for name, envoy in result.envoys.items():
            url = f"http://127.0.0.1:{envoy.port}/v1/completions"
            await _wait(functools.partial(_http_ok, session, url, body), 60, f"{name}: no 200 through Envoy")
        await _wait(
            functools.partial(_picker_sees_all, session, result, options.endpoints),
            30,
            "picker never scraped every pod",
        )
        yield result


async def _wait(probe: Callable[[], Awaitable[bool]], timeout: float, message: str) -> None:
    deadline = time.monotonic() + timeout
    while not await probe():
        if time.monotonic() > deadline:
            raise TimeoutError(message)
        await asyncio.sleep(0.1)


async def _picker_sees_all(session: aiohttp.ClientSession, stack: Stack, endpoints: int) -> bool:
    """The picker has scraped (about) every pod twice, so the datastore holds them all with metrics."""
    text = await _fetch_text(session, stack.epp_metrics_url)
    samples = parse(text, ["epp_scrape_duration_seconds_count"]).samples.get("epp_scrape_duration_seconds_count", [])
    return sum(s.value for s in samples) >= endpoints * 2


async def _fetch_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as resp:
        resp.raise_for_status()
        return await resp.text()


# ------------------------------------------------------------------------------- measurements


@dataclass
class _Round:
    load: LoadResult
    cpu: dict[str, float]


def _cpu_of(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_seconds(pid) for name, pid in pids.items()}


async def _measured(pids: dict[str, int], load: Awaitable[LoadResult]) -> _Round:
    """Run ``load`` (a coroutine not yet started) and charge the CPU the processes used meanwhile."""
    before = _cpu_of(pids)
    result = await load
    after = _cpu_of(pids)
    return _Round(result, {k: after[k] - before[k] for k in pids})


def _summarise(variant: str, size: int, concurrency: int, rounds: Sequence[_Round]) -> dict[str, Any]:
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


def _histograms(text: str) -> dict[str, dict[str, Any]]:
    """``epp_picker_overhead_seconds`` per phase: cumulative buckets, sum and count."""
    name = "epp_picker_overhead_seconds"
    parsed = parse(text, [f"{name}_bucket", f"{name}_sum", f"{name}_count"]).samples
    out: dict[str, dict[str, Any]] = {}
    for s in parsed.get(f"{name}_bucket", []):
        phase = out.setdefault(s.labels["phase"], {"buckets": {}, "sum": 0.0, "count": 0.0})
        phase["buckets"][float(s.labels["le"])] = s.value
    for kind in ("sum", "count"):
        for s in parsed.get(f"{name}_{kind}", []):
            out.setdefault(s.labels["phase"], {"buckets": {}, "sum": 0.0, "count": 0.0})[kind] = s.value
    return out


def _quantile(buckets: Sequence[tuple[float, float]], q: float) -> float:
    """Prometheus' histogram_quantile over (upper bound, cumulative count) pairs."""
    total = buckets[-1][1] if buckets else 0.0
    if total <= 0:
        return 0.0
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if bound == float("inf"):
                return lower_bound
            width = count - lower_count
            return lower_bound + (bound - lower_bound) * ((rank - lower_count) / width if width else 0.0)
        lower_bound, lower_count = bound, count
    return lower_bound


def phase_overhead(before: str, after: str) -> dict[str, dict[str, float]]:
    """Per phase: count, mean and p50/p90/p99 (µs) of the observations between two /metrics texts."""
    a, b = _histograms(before), _histograms(after)
    result: dict[str, dict[str, float]] = {}
    for phase, hist in b.items():
        prior = a.get(phase, {"buckets": {}, "sum": 0.0, "count": 0.0})
        count = hist["count"] - prior["count"]
        if count <= 0:
            continue
        buckets = sorted((le, v - prior["buckets"].get(le, 0.0)) for le, v in hist["buckets"].items())
        result[phase] = {
            "count": count,
            "mean_us": (hist["sum"] - prior["sum"]) / count * 1e6,
            "p50_us": _quantile(buckets, 0.5) * 1e6,
            "p90_us": _quantile(buckets, 0.9) * 1e6,
            "p99_us": _quantile(buckets, 0.99) * 1e6,
        }
    return result


async def _http_cells(
    options: OverheadOptions, stack: Stack, loads: LoadGenerator, session: aiohttp.ClientSession
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    cells: list[dict[str, Any]] = []
    phases: list[dict[str, Any]] = []
    for size in options.prompt_bytes:
        body_file = stack.work / f"body-{size}.json"
        await asyncio.to_thread(body_file.write_bytes, prompt_body(size))
        for concurrency in options.concurrencies:
            rounds: dict[str, list[_Round]] = {v: [] for v in VARIANTS}
            metrics_before = await _fetch_text(session, stack.epp_metrics_url)
            for _ in range(options.rounds):
                for variant in VARIANTS:
                    target = f"127.0.0.1:{stack.envoys[variant].port}"
                    load = loads.http(target, body_file, concurrency=concurrency, duration=options.round_seconds)
                    rounds[variant].append(await _measured(stack.pids(variant), load))
            metrics_after = await _fetch_text(session, stack.epp_metrics_url)
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


async def _grpc_direct(options: OverheadOptions, stack: Stack, loads: LoadGenerator) -> list[dict[str, Any]]:
    """ext_proc streams/s straight to each processor, interleaved rounds, no Envoy."""
    out = []
    for size in options.prompt_bytes:
        body = prompt_body(size)
        rounds: dict[str, list[_Round]] = {"noop": [], "epp": []}
        for _ in range(options.rounds):
            for name, target, pid in (
                ("noop", stack.noop_grpc, stack.noop.pid),
                ("epp", stack.epp_grpc, stack.epp.pid),
            ):
                load = loads.grpc(target, body, concurrency=options.grpc_concurrency, duration=options.round_seconds)
                rounds[name].append(await _measured({"processor": pid}, load))
        for name, rs in rounds.items():
            cell = _summarise(name, size, options.grpc_concurrency, rs)
            cell["streams_per_s"] = cell.pop("rps")
            out.append(cell)
    return out


async def _scrape_costs(options: OverheadOptions, stack: Stack) -> list[dict[str, Any]]:
    results = []
    for count in options.scrape_endpoints:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "epp_sim.bench.scrape_cost",
            "--count",
            str(count),
            "--port",
            str(stack.backend_port),
            "--duration",
            str(options.scrape_seconds),
            "--warmup",
            "1.0",
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
        out, err = await proc.communicate()
        if proc.returncode != 0:
            raise RuntimeError(f"scrape_cost failed: {err.decode(errors='replace')[-2000:]}")
        results.append(json.loads(out.decode().strip().splitlines()[-1]))
    return results


async def _profile(options: OverheadOptions, stack: Stack, loads: LoadGenerator) -> dict[str, Any]:
    """py-spy on the picker while Envoy drives it at concurrency 16 with 1 KB prompts."""
    body_file = stack.work / "body-profile.json"
    await asyncio.to_thread(body_file.write_bytes, prompt_body(1024))
    target = f"127.0.0.1:{stack.envoys['epp'].port}"
    load = asyncio.create_task(
        loads.http(target, body_file, concurrency=16, duration=options.profile_seconds + 1), name="bench-profile-load"
    )
    try:
        summary = await record(stack.epp.pid, options.profile_seconds, stack.work / "epp.pyspy.txt")
    finally:
        result = await load
    doc = summary.to_json()
    doc["rps_while_profiled"] = result.rate
    return doc


async def _soak(options: OverheadOptions, stack: Stack, loads: LoadGenerator) -> dict[str, Any]:
    """Constant load through the picker; RSS of the picker and its Envoy sampled every few seconds."""
    body_file = stack.work / "body-soak.json"
    await asyncio.to_thread(body_file.write_bytes, prompt_body(1024))
    target = f"127.0.0.1:{stack.envoys['epp'].port}"
    samples: list[dict[str, float]] = []
    started = time.monotonic()
    requests = 0
    while (elapsed := time.monotonic() - started) < options.soak_seconds:
        samples.append(
            {
                "t_s": round(elapsed, 1),
                "epp_rss_mib": rss_bytes(stack.epp.pid) / 2**20,
                "envoy_rss_mib": rss_bytes(stack.envoys["epp"].pid) / 2**20,
                "requests": requests,
            }
        )
        step = min(options.soak_sample_seconds, options.soak_seconds - elapsed)
        result = await loads.http(target, body_file, concurrency=16, duration=max(1.0, step))
        requests += result.requests
    samples.append(
        {
            "t_s": round(time.monotonic() - started, 1),
            "epp_rss_mib": rss_bytes(stack.epp.pid) / 2**20,
            "envoy_rss_mib": rss_bytes(stack.envoys["epp"].pid) / 2**20,
            "requests": requests,
        }
    )
    # Growth after the first fifth of the run (allocator warm-up, caches filling) is what leaks look like.
    settled = samples[len(samples) // 5]
    return {
        "seconds": options.soak_seconds,
        "requests": requests,
        "samples": samples,
        "epp_rss_growth_mib": samples[-1]["epp_rss_mib"] - settled["epp_rss_mib"],
    }


def _targets(doc: dict[str, Any]) -> dict[str, Any]:
    """The issue's targets, each with the measured value and whether it was met (None: not measured)."""
    cells = {(c["variant"], c["prompt_bytes"], c["concurrency"]): c for c in doc["http"]}

    def cell(size: int, concurrency: int) -> dict[str, Any] | None:
        return cells.get(("epp", size, concurrency))

    small, large = cell(1024, 16), cell(220 * 1024, 16)
    # In a closed loop at c=16 the p50 difference is mostly queueing behind the lower throughput
    # (Little's law), so the per-request cost is also checked at c=1.
    small1, large1 = cell(1024, 1), cell(220 * 1024, 1)
    scrape8 = next((s for s in doc["scrape"] if s["endpoints"] == 8), None)
    soak = doc.get("soak")
    return {
        "throughput_vs_noop_c16_ge_0.85": _check(small and small["rps_vs_noop"], lambda v: v >= 0.85),
        "added_p50_1kb_c16_lt_1ms": _check(small and small["added_p50_vs_noop_ms"], lambda v: v < 1.0),
        "added_p50_220kb_c16_lt_5ms": _check(large and large["added_p50_vs_noop_ms"], lambda v: v < 5.0),
        "added_p50_1kb_c1_lt_1ms": _check(small1 and small1["added_p50_vs_noop_ms"], lambda v: v < 1.0),
        "added_p50_220kb_c1_lt_5ms": _check(large1 and large1["added_p50_vs_noop_ms"], lambda v: v < 5.0),
        "scrape_8_endpoints_lt_0.10_core": _check(scrape8 and scrape8["cpu_per_s"], lambda v: v < 0.10),
        "soak_rss_growth_lt_10mib": _check(soak and soak["epp_rss_growth_mib"], lambda v: v < 10.0),
    }


def _check(value: Any, ok: Callable[[float], bool]) -> dict[str, Any]:
    if value is None or value is False:
        return {"value": None, "met": None}
    return {"value": round(float(value), 4), "met": bool(ok(float(value)))}


async def run_overhead(options: OverheadOptions) -> dict[str, Any]:
    """Run the whole overhead benchmark and return its JSON document (logs are kept only on failure)."""
    started = time.monotonic()
    work = Path(await asyncio.to_thread(tempfile.mkdtemp, prefix="epp-bench-overhead-"))
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
    try:
        async with (
            start_stack(options, work) as stack,
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session,
        ):
            doc["http"], doc["picker_phases"] = await _http_cells(options, stack, loads, session)
            doc["grpc_direct"] = await _grpc_direct(options, stack, loads)
            doc["scrape"] = await _scrape_costs(options, stack)
            if options.profile_seconds > 0:
                doc["profile"] = await _profile(options, stack, loads)
            if options.soak_seconds > 0:
                doc["soak"] = await _soak(options, stack, loads)
            doc["rss_mib"] = {
                "epp": rss_bytes(stack.epp.pid) / 2**20,
                "noop": rss_bytes(stack.noop.pid) / 2**20,
                "envoy": rss_bytes(stack.envoys["epp"].pid) / 2**20,
            }
    except BaseException:
        print(f"overhead benchmark failed; logs kept in {work}", file=sys.stderr)
        raise
    doc["targets"] = _targets(doc)
    doc["elapsed_s"] = round(time.monotonic() - started, 1)
    await asyncio.to_thread(shutil.rmtree, work, True)
    return doc
