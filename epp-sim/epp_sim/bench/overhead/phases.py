"""The picker's own account of its cost: ``epp_picker_overhead_seconds`` per phase, between two scrapes.

``epp serve`` times every request's phases (parse, schedule, respond, total) into one histogram.
Scraping its ``/metrics`` before and after a cell of rounds and subtracting the cumulative
buckets gives the observations of that cell alone; the quantiles are then read off the buckets
the way Prometheus' ``histogram_quantile`` does, so the numbers match a dashboard's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from epp.datalayer.promtext import parse

__all__ = ["phase_overhead"]

_HISTOGRAM = "epp_picker_overhead_seconds"


def _no_observations() -> dict[str, Any]:
    return {"buckets": {}, "sum": 0.0, "count": 0.0}


def _histograms(text: str) -> dict[str, dict[str, Any]]:
    """``epp_picker_overhead_seconds`` per phase: cumulative buckets, sum and count."""
    name = _HISTOGRAM
    parsed = parse(text, [f"{name}_bucket", f"{name}_sum", f"{name}_count"]).samples
    out: dict[str, dict[str, Any]] = {}
    for s in parsed.get(f"{name}_bucket", []):
        phase = out.setdefault(s.labels["phase"], _no_observations())
        phase["buckets"][float(s.labels["le"])] = s.value
    for kind in ("sum", "count"):
        for s in parsed.get(f"{name}_{kind}", []):
            out.setdefault(s.labels["phase"], _no_observations())[kind] = s.value
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
        prior = a.get(phase) or _no_observations()
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
