"""Run one closed-loop load as a separate process: ``wrk`` / ``h2load`` when installed, else our Python generator.

The C tools cost a fraction of the CPU a Python client does, which matters on a 2-core machine
where the load generator competes with Envoy and the picker; the Python generator
(``epp_sim.bench.loadgen``) keeps the benchmark working without them. Every result names the tool
that produced it, and carries the generator's own CPU seconds (``RUSAGE_CHILDREN`` around the
child's lifetime), so a reader can see how much of the machine it took.

- HTTP: ``wrk -t1 -c<concurrency>`` with a Lua script that POSTs the body file (on request with
  each prompt made unique) and prints its count, errors and percentiles as JSON.
- gRPC (ext_proc straight to a processor): ``h2load -c1 -m<concurrency>`` POSTing the gRPC-framed
  ``Process`` messages; percentiles come from its per-request log.
"""

from __future__ import annotations

import asyncio
import json
import re
import resource
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from epp_sim.bench.children import output_of
from epp_sim.bench.loadgen import LoadResult, ext_proc_messages, grpc_frames, percentile

__all__ = ["LoadGenerator", "LoadToolError", "ToolChoice"]

ToolChoice = Literal["auto", "native", "python"]

_WRK_SCRIPT = r"""
local f = assert(io.open(os.getenv("EPP_BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
local run = os.getenv("EPP_BENCH_UNIQUE") or ""
if run ~= "" then
  local head, tail, n = wrk.body:sub(1, -3), wrk.body:sub(-2), 0
  request = function()
    n = n + 1
    return wrk.format(nil, nil, nil, head .. " #" .. run .. "-" .. n .. tail)
  end
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'EPPJSON {"requests":%d,"duration_us":%d,"connect":%d,"read":%d,"write":%d,"status":%d,"timeout":%d,' ..
    '"p50":%d,"p90":%d,"p99":%d,"mean":%f}\n',
    summary.requests, summary.duration, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.mean))
end
"""
_GRPC_PATH = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"


class LoadToolError(RuntimeError):
    """A load generator failed or printed something we cannot read."""


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


async def _run(argv: list[str], env: dict[str, str] | None = None) -> tuple[str, float]:
    """Run a load tool to completion; its stdout and the CPU seconds it used."""
    cpu0 = _children_cpu()
    out = await output_of(argv, env=env, error=LoadToolError)
    return out, _children_cpu() - cpu0


@dataclass
class LoadGenerator:
    """Runs HTTP and ext_proc gRPC loads with the chosen tools; ``work_dir`` holds bodies and scripts."""

    work_dir: Path
    choice: ToolChoice = "auto"

    def __post_init__(self) -> None:
        native = self.choice != "python"
        self.wrk = shutil.which("wrk") if native else None
        self.h2load = shutil.which("h2load") if native else None
        if self.choice == "native" and not (self.wrk and self.h2load):
            raise LoadToolError("--loadgen native needs wrk and h2load on PATH (apt-get install wrk nghttp2-client)")

    @property
    def http_tool(self) -> str:
        return "wrk" if self.wrk else "python-http"

    @property
    def grpc_tool(self) -> str:
        return "h2load" if self.h2load else "python-grpc"

    async def http(
        self, target: str, body_file: Path, *, concurrency: int, duration: float, unique: str = ""
    ) -> LoadResult:
        """POST ``body_file`` to ``http://target/v1/completions`` from ``concurrency`` connections.

        ``unique``: a run id; each request's prompt then ends with it and a counter (no two alike).
        """
        if self.wrk is None:
            extra = ["--unique", unique] if unique else []
            return await self._python("http", target, body_file, concurrency, duration, *extra)
        script = self.work_dir / "wrk.lua"
        if not script.exists():
            await asyncio.to_thread(script.write_text, _WRK_SCRIPT, encoding="utf-8")
        argv = [
            self.wrk,
            "-t1",
            f"-c{concurrency}",
            f"-d{max(1, round(duration))}s",
            "--timeout",
            "10s",
            "-s",
            str(script),
            f"http://{target}/v1/completions",
        ]
        env = {"EPP_BENCH_BODY": str(body_file), "EPP_BENCH_UNIQUE": unique, "PATH": "/usr/bin:/bin"}
        out, cpu = await _run(argv, env=env)
        match = re.search(r"^EPPJSON (\{.*\})$", out, re.MULTILINE)
        if match is None:
            raise LoadToolError(f"wrk printed no result:\n{out[-2000:]}")
        doc = json.loads(match.group(1))
        kinds = {k: int(doc[k]) for k in ("connect", "read", "write", "status", "timeout") if doc[k]}
        failed = int(doc["status"])
        return LoadResult(
            tool="wrk",
            requests=int(doc["requests"]) - failed,
            errors=sum(kinds.values()),
            duration=doc["duration_us"] / 1e6,
            p50=doc["p50"] / 1e6,
            p90=doc["p90"] / 1e6,
            p99=doc["p99"] / 1e6,
            mean=doc["mean"] / 1e6,
            error_kinds=kinds,
            loadgen_cpu=cpu,
        )

    async def grpc(self, target: str, body: bytes, *, concurrency: int, duration: float) -> LoadResult:
        """``concurrency`` concurrent ext_proc streams straight to the processor at ``target``."""
        body_file = self.work_dir / f"grpc-body-{len(body)}.bin"
        if self.h2load is None:
            if not body_file.exists():
                await asyncio.to_thread(body_file.write_bytes, body)
            return await self._python("grpc", target, body_file, concurrency, duration)
        frames = self.work_dir / f"grpc-frames-{len(body)}.bin"
        if not frames.exists():
            await asyncio.to_thread(frames.write_bytes, grpc_frames(ext_proc_messages(body)))
        log = self.work_dir / "h2load.log"
        argv = [
            self.h2load,
            "-c1",
            f"-m{concurrency}",
            f"-D{max(1, round(duration))}",
            "--warm-up-time=300ms",
            "-d",
            str(frames),
            "-H",
            "content-type: application/grpc",
            "-H",
            "te: trailers",
            "--log-file",
            str(log),
            f"http://{target}{_GRPC_PATH}",
        ]
        out, cpu = await _run(argv)
        return await asyncio.to_thread(_h2load_result, out, log, cpu)

    async def _python(
        self, mode: str, target: str, body_file: Path, concurrency: int, duration: float, *extra: str
    ) -> LoadResult:
        argv = [
            sys.executable,
            "-m",
            "epp_sim.bench.loadgen",
            mode,
            "--target",
            target,
            "--body-file",
            str(body_file),
            "--concurrency",
            str(concurrency),
            "--duration",
            str(duration),
            *extra,
        ]
        out, _ = await _run(argv)
        return LoadResult.from_json(json.loads(out.strip().splitlines()[-1]))


def _h2load_result(out: str, log: Path, cpu: float) -> LoadResult:
    finished = re.search(r"finished in ([\d.]+)(m?s)", out)
    counts = re.search(
        r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, (\d+) failed, (\d+) errored", out
    )
    if finished is None or counts is None:
        raise LoadToolError(f"h2load printed no result:\n{out[-2000:]}")
    duration = float(finished.group(1)) / (1000.0 if finished.group(2) == "ms" else 1.0)
    latencies: list[float] = []
    for line in log.read_text(encoding="utf-8").splitlines():
        parts = line.split("\t")
        if len(parts) >= 3 and parts[1] == "200":
            latencies.append(int(parts[2]) / 1e6)
    latencies.sort()
    failed, errored = int(counts.group(4)), int(counts.group(5))
    kinds = {k: v for k, v in (("failed", failed), ("errored", errored)) if v}
    return LoadResult(
        tool="h2load",
        requests=int(counts.group(3)),
        errors=failed + errored,
        duration=duration,
        p50=percentile(latencies, 50),
        p90=percentile(latencies, 90),
        p99=percentile(latencies, 99),
        mean=sum(latencies) / len(latencies) if latencies else 0.0,
        error_kinds=kinds,
        loadgen_cpu=cpu,
    )
