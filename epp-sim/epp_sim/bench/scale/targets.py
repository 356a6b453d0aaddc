"""The scale targets (issue 23, docs/benchmarks.md), read off a finished document: each value and whether it was met.

A target whose cell was not measured (a quick run, other pod counts) is reported with ``met: None``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["scale_targets"]


def _verdict(value: float | None, ok: bool | None) -> dict[str, Any]:
    if value is None or ok is None:
        return {"value": None, "met": None}
    return {"value": round(value, 4), "met": ok}


def scale_targets(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Idle CPU at 100 and 400 pods with ≥ 15 fetches per pod and second, the p50 the pods add at c=1,
    and the default configuration's CPU per 400 KiB request."""
    idle = {(i["mode"], i["pods"]): i for i in doc["idle"]}
    latency = {(lat["mode"], lat["pods"]): lat for lat in doc["latency"]}
    cells = {(c["config"], c["prompt_kib"]): c for c in doc.get("cpu_per_request", [])}
    out: dict[str, Any] = {}
    for mode in doc["options"]["scrape_modes"]:
        for pods, cores in ((100, 0.25), (400, 1.0)):
            cell = idle.get((mode, pods))
            ok = None if cell is None else cell["cpu_cores"] <= cores and cell["fetches_per_pod_per_s"] >= 15.0
            out[f"idle_{pods}_pods_{mode}_le_{cores}_core_at_15_fetches"] = _verdict(cell and cell["cpu_cores"], ok)
    for (mode, pods), lat in sorted(latency.items()):
        added = lat["added_p50_ms"]
        out[f"added_p50_c1_{pods}_pods_{mode}_le_0.5ms"] = _verdict(added, added <= 0.5)
    big = cells.get(("default", 400))
    ms = big["picker_cpu_ms_per_request"] if big else None
    out["default_400kib_le_3ms_cpu_per_request"] = _verdict(ms, None if ms is None else ms <= 3.0)
    workers = {(c["workers"], c["prompt_kib"]): c for c in doc.get("workers", [])}
    one = workers.get((1, 400))
    ms = one["picker_cpu_ms_per_request"] if one else None
    out["precise_400kib_le_60ms_cpu_per_request"] = _verdict(ms, None if ms is None else ms <= 60.0)
    for (count, kib), cell in sorted(workers.items()):
        if count == 2:
            ratio = cell["throughput_vs_one_worker"]
            out[f"precise_{kib}kib_two_workers_ge_1.7x_one"] = _verdict(ratio, None if ratio is None else ratio >= 1.7)
    return out
