"""Sample a running process with ``py-spy`` and summarise where its CPU goes.

The overhead benchmark points this at ``epp serve`` while Envoy drives it, so the report names
the functions that bound the picker's throughput. ``py-spy record --gil --format raw`` writes
collapsed stacks (``frame;frame;... count``) of the thread holding the GIL only: the Python CPU
time that bounds a single-loop server. (py-spy's idle detection misses threads blocked inside C
extensions, such as gRPC's poller and executor threads, so without ``--gil`` they would look
busy.) Time spent inside the gRPC Cython layer shows as self time of the Python frame that
awaited it. "self" is where the sample was taken; "inclusive" counts a function once per stack
it appears in.
"""

from __future__ import annotations

import asyncio
import shutil
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epp_sim.bench.children import output_of

__all__ = ["ProfileSummary", "py_spy_binary", "record", "summarise"]


@dataclass(frozen=True, slots=True)
class ProfileSummary:
    """Top functions by self and inclusive share of the busy samples."""

    samples: int
    top_self: list[tuple[str, float]]
    top_inclusive: list[tuple[str, float]]

    def to_json(self) -> dict[str, Any]:
        return {
            "samples": self.samples,
            "top_self": [{"function": f, "share": s} for f, s in self.top_self],
            "top_inclusive": [{"function": f, "share": s} for f, s in self.top_inclusive],
        }


def py_spy_binary() -> str | None:
    """``py-spy`` next to this interpreter (``pip install py-spy``), else on PATH, else None."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.is_file() else shutil.which("py-spy")


def _short(frame: str) -> str:
    """``func (path/to/module.py)`` → ``func (module.py)`` with the package path kept from ``epp/``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for marker in ("/epp/", "/site-packages/", "/lib/python"):
        if marker in where:
            where = where.split(marker, 1)[1]
            if marker == "/epp/":
                where = "epp/" + where
            break
    return f"{name} ({where})" if where else name


def summarise(raw: str, *, top: int = 15) -> ProfileSummary:
    """Collapsed stacks → the ``top`` functions by self and by inclusive share."""
    self_counts: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_short(f) for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        for frame in set(frames):
            inclusive[frame] += count
    if total == 0:
        return ProfileSummary(0, [], [])
    return ProfileSummary(
        samples=total,
        top_self=[(f, c / total) for f, c in self_counts.most_common(top)],
        top_inclusive=[(f, c / total) for f, c in inclusive.most_common(top)],
    )


async def record(pid: int, seconds: float, out: Path, *, rate: int = 250) -> ProfileSummary:
    """Sample ``pid`` for ``seconds`` with py-spy; raises RuntimeError if py-spy is missing or fails."""
    binary = py_spy_binary()
    if binary is None:
        raise RuntimeError("py-spy is not installed (.venv/bin/pip install py-spy)")
    await output_of(
        [
            binary,
            "record",
            "--pid",
            str(pid),
            "--duration",
            str(max(1, round(seconds))),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--nolineno",
            "--gil",
            "--output",
            str(out),
        ]
    )
    text = await asyncio.to_thread(out.read_text, encoding="utf-8")
    return summarise(text)
