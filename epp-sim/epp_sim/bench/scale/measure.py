"""What ``epp bench scale`` reads off a picker: its processes, and a set of load rounds summed up."""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

from epp_sim.bench.overhead.rounds import Round
from epp_sim.bench.procstat import child_pids
from epp_sim.bench.scale.stack import ScaleStack

__all__ = ["picker_pids", "summarise"]


def picker_pids(stack: ScaleStack, picker: str) -> dict[str, int]:
    """The picker's process and its children (a scrape worker, ``--workers`` children)."""
    pid = stack.pickers[picker].pid
    return {"picker": pid, **{f"child-{i}": child for i, child in enumerate(child_pids(pid))}}


def summarise(rounds: Sequence[Round]) -> dict[str, Any]:
    requests = sum(r.load.requests for r in rounds)
    duration = sum(r.load.duration for r in rounds)
    cpu = sum(sum(r.cpu.values()) for r in rounds)
    return {
        "rounds": len(rounds),
        "requests": requests,
        "errors": sum(r.load.errors for r in rounds),
        "rps": requests / duration if duration else 0.0,
        "p50_ms": statistics.median(r.load.p50 for r in rounds) * 1e3,
        "p99_ms": statistics.median(r.load.p99 for r in rounds) * 1e3,
        "picker_cores": cpu / duration if duration else 0.0,
        "picker_cpu_ms_per_request": cpu / requests * 1e3 if requests else None,
    }
