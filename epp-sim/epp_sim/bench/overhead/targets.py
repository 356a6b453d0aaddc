"""The overhead targets (docs/benchmarks.md), read off a finished document: each value, and whether it was met.

Kept apart from the measuring so the thresholds are in one place and a reader of the JSON can
find exactly which cell each verdict comes from. A target whose cell was not measured (a quick
run, no soak) is reported with ``met: None`` rather than passed or failed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

__all__ = ["overhead_targets"]


def overhead_targets(doc: Mapping[str, Any]) -> dict[str, Any]:
    """The issue's targets, each with the measured value and whether it was met (None: not measured)."""
    cells = {(c["variant"], c["prompt_bytes"], c["concurrency"]): c for c in doc["http"]}

    def cell(size: int, concurrency: int) -> dict[str, Any] | None:
        return cells.get(("epp", size, concurrency))

    small, large = cell(1024, 16), cell(220 * 1024, 16)
    large4 = cell(220 * 1024, 4)
    # In a closed loop at c=16 the p50 difference is mostly queueing behind the lower throughput
    # (Little's law), so the per-request cost is also checked at c=1.
    small1, large1 = cell(1024, 1), cell(220 * 1024, 1)
    scrape8 = next((s for s in doc["scrape"] if s["endpoints"] == 8), None)
    pairs = (doc.get("soak") or {}).get("pairs", {})

    def slope(pair: str) -> float | None:
        value = pairs.get(pair, {}).get("rss_slope_bytes_per_request")
        return None if value is None else float(value)

    return {
        "throughput_vs_noop_1kb_c16_ge_0.90": _check(small and small["rps_vs_noop"], lambda v: v >= 0.90),
        "throughput_vs_noop_220kb_c4_ge_0.85": _check(large4 and large4["rps_vs_noop"], lambda v: v >= 0.85),
        "added_p50_1kb_c1_le_0.5ms": _check(small1 and small1["added_p50_vs_noop_ms"], lambda v: v <= 0.5),
        "added_p50_220kb_c1_le_2ms": _check(large1 and large1["added_p50_vs_noop_ms"], lambda v: v <= 2.0),
        "added_p50_1kb_c16_lt_1ms": _check(small and small["added_p50_vs_noop_ms"], lambda v: v < 1.0),
        "added_p50_220kb_c16_lt_5ms": _check(large and large["added_p50_vs_noop_ms"], lambda v: v < 5.0),
        "scrape_8_endpoints_lt_0.10_core": _check(scrape8 and scrape8["cpu_per_s"], lambda v: v < 0.10),
        "rss_slope_stock_envoy_le_10_bytes_per_request": _check(slope("epp/stock"), lambda v: v <= 10.0),
        "rss_slope_graceful_envoy_le_5_bytes_per_request": _check(slope("epp/graceful"), lambda v: v <= 5.0),
    }


def _check(value: Any, ok: Callable[[float], bool]) -> dict[str, Any]:
    if value is None or value is False:
        return {"value": None, "met": None}
    return {"value": round(float(value), 4), "met": bool(ok(float(value)))}
