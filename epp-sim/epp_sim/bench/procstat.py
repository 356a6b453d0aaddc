"""CPU time and resident memory of a process, read from ``/proc/<pid>/stat`` and ``/proc/<pid>/statm``.

The benchmarks report what each process (Envoy, the picker, the no-op processor, the backend,
the load generator) costs, so a slow result can be blamed on the right part. CPU is user +
system time of every thread of the process (Envoy's workers included); dividing a difference by
the wall time between two reads gives "cores used". Reads are tiny synchronous file reads,
done between measurement rounds, never on a request path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

__all__ = ["ProcSample", "child_pids", "cpu_seconds", "read_proc", "rss_bytes"]

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass(frozen=True, slots=True)
class ProcSample:
    """CPU seconds used so far (user + system, all threads) and the resident set size."""

    cpu: float
    rss: int


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far; raises ProcessLookupError if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except FileNotFoundError:
        raise ProcessLookupError(f"no process {pid}") from None
    # The command name (field 2) may contain spaces and parentheses: split after the last ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    # fields[0] is field 3 (state); utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / _TICKS


def rss_bytes(pid: int) -> int:
    """Resident set size of ``pid`` in bytes."""
    try:
        with open(f"/proc/{pid}/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE
    except FileNotFoundError:
        raise ProcessLookupError(f"no process {pid}") from None


def read_proc(pid: int) -> ProcSample:
    """CPU seconds and RSS of ``pid`` now."""
    return ProcSample(cpu_seconds(pid), rss_bytes(pid))


def child_pids(pid: int) -> list[int]:
    """The processes ``pid`` started and that still run (its direct children, any thread's)."""
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children", "rb") as f:
                out.extend(int(c) for c in f.read().split())
    except FileNotFoundError:
        raise ProcessLookupError(f"no process {pid}") from None
    return out
