"""Benchmark output: the machine line, plain-text tables, the JSON document and PNG plots.

Both benchmarks build one JSON-ready dict; this module prints it as tables, writes it to
``<out>/<name>.json`` and draws the plots with matplotlib (headless ``Agg``; skipped with a note
when matplotlib is not installed, since the numbers matter more than the pictures).
"""

from __future__ import annotations

import asyncio
import json
import os
import platform
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["format_table", "machine_info", "machine_line", "plot_overhead", "plot_routing", "write_json"]


def format_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A fixed-width text table; floats are printed as given (format them first)."""
    cells = [[str(h) for h in headers], *[[str(c) for c in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def write_json(path: Path, doc: Mapping[str, Any]) -> Path:
    """Write ``doc`` as indented JSON (blocking: call via ``asyncio.to_thread`` on a loop)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2, sort_keys=False) + "\n", encoding="utf-8")
    return path


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory_gib() -> float:
    try:
        with open("/proc/meminfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 1024 / 1024
    except OSError:
        pass
    return 0.0


async def machine_info(envoy: str | None = None) -> dict[str, Any]:
    """CPU model and count, memory, Python, Envoy version: the hardware line of every result."""
    info: dict[str, Any] = {
        "cpu": _cpu_model(),
        "cpus": os.cpu_count() or 0,
        "memory_gib": round(_memory_gib(), 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "envoy": None,
    }
    if envoy is not None:
        proc = await asyncio.create_subprocess_exec(
            envoy, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
        )
        out, _ = await proc.communicate()
        match = re.search(r"version: \S+/(\d+\.\d+\.\d+)", out.decode(errors="replace"))
        info["envoy"] = match.group(1) if match else out.decode(errors="replace").strip()[:120]
    return info


def machine_line(info: Mapping[str, Any]) -> str:
    """``2 × Intel(R) Xeon(R) Processor, 23.4 GiB, Python 3.11.2, Envoy 1.40.0``."""
    envoy = f", Envoy {info['envoy']}" if info.get("envoy") else ""
    return f"{info['cpus']} × {info['cpu']}, {info['memory_gib']} GiB, Python {info['python']}{envoy}"


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_overhead(doc: Mapping[str, Any], path: Path) -> Path | None:
    """Requests/s and p50 per variant, one column per prompt size, against concurrency."""
    plt = _pyplot()
    if plt is None:
        return None
    cells = doc["http"]
    sizes = sorted({c["prompt_bytes"] for c in cells})
    fig, axes = plt.subplots(2, len(sizes), figsize=(5.5 * len(sizes), 7), squeeze=False)
    for col, size in enumerate(sizes):
        for variant in ("envoy", "noop", "epp"):
            rows = sorted(
                (c for c in cells if c["prompt_bytes"] == size and c["variant"] == variant),
                key=lambda c: c["concurrency"],
            )
            xs = [c["concurrency"] for c in rows]
            axes[0][col].plot(xs, [c["rps"] for c in rows], marker="o", label=variant)
            axes[1][col].plot(xs, [c["p50_ms"] for c in rows], marker="o", label=variant)
        axes[0][col].set_title(f"{size // 1024} KB prompts")
        axes[0][col].set_ylabel("requests/s")
        axes[1][col].set_ylabel("p50 latency (ms)")
        axes[1][col].set_xlabel("concurrency")
        for row in axes:
            row[col].set_xscale("log", base=2)
            row[col].grid(True, alpha=0.3)
            row[col].legend()
    fig.suptitle("Envoy alone vs + no-op ext_proc vs + epp")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_routing(doc: Mapping[str, Any], path: Path) -> Path | None:
    """TTFT p90 and end-to-end p50 against request rate, one line per strategy, one column per workload."""
    plt = _pyplot()
    if plt is None:
        return None
    runs = doc["runs"]
    workloads = list(dict.fromkeys(r["workload"] for r in runs))
    strategies = list(dict.fromkeys(r["strategy"] for r in runs))
    fig, axes = plt.subplots(2, len(workloads), figsize=(6 * len(workloads), 8), squeeze=False)
    for col, workload in enumerate(workloads):
        for strategy in strategies:
            rows = sorted(
                (r for r in runs if r["workload"] == workload and r["strategy"] == strategy), key=lambda r: r["rate"]
            )
            xs = [r["rate"] for r in rows]
            axes[0][col].plot(xs, [r["ttft_s"]["p90"] for r in rows], marker="o", label=strategy)
            axes[1][col].plot(xs, [r["e2e_s"]["p50"] for r in rows], marker="o", label=strategy)
        axes[0][col].set_title(workload)
        axes[0][col].set_ylabel("TTFT p90 (simulated s)")
        axes[1][col].set_ylabel("end-to-end p50 (simulated s)")
        axes[1][col].set_xlabel("request rate (simulated req/s)")
        for row in axes:
            row[col].set_yscale("log")
            row[col].grid(True, alpha=0.3)
            row[col].legend(fontsize=8)
    fig.suptitle("Routing strategies on the same seeded arrivals")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
