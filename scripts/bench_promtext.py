#!/usr/bin/env python3
"""Parse cost per /metrics page: our targeted parser vs prometheus_client's full parser.

Prints microseconds per page (best of several repeats) for realistic vLLM pages of a few sizes,
and what that means for the scrape loop's budget (8 endpoints every 50 ms = 160 pages/s).
Numbers, not assertions: run it before and after touching epp/datalayer/promtext.py.

    .venv/bin/python scripts/bench_promtext.py
"""

from __future__ import annotations

import sys
import timeit
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "datalayer"))  # the realistic page generator lives with the tests

from prometheus_client.parser import text_string_to_metric_families  # noqa: E402
from vllm_metrics_fixture import VllmPage, render_vllm_metrics  # noqa: E402

from epp.datalayer.engines import ENGINES, read  # noqa: E402
from epp.datalayer.promtext import parse  # noqa: E402

PAGES_PER_SECOND = 8 / 0.05


def best_us(fn: object, number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6  # type: ignore[arg-type]


def main() -> None:
    vllm = ENGINES["vllm"]
    print(f"{'page':<34}{'KB':>6}{'lines':>7}{'parse µs':>10}{'read µs':>9}{'naive µs':>10}{'speedup':>9}{'core %':>8}")
    for label, models in (
        ("1 model", ("meta-llama/Llama-3.1-8B-Instruct",)),
        ("2 models (default fixture)", ("meta-llama/Llama-3.1-8B-Instruct", "sql-lora")),
        ("4 models", ("meta-llama/Llama-3.1-8B-Instruct", "sql-lora", "tweet-lora", "chat-lora")),
    ):
        text = render_vllm_metrics(VllmPage(model_names=models))
        data = text.encode()
        ours = best_us(lambda data=data: parse(data, vllm.names), 300)
        full = best_us(lambda data=data: read(data, vllm, updated_at=1.0), 300)
        naive = best_us(lambda text=text: list(text_string_to_metric_families(text)), 5)
        core = full * PAGES_PER_SECOND / 1e6 * 100
        print(
            f"{label:<34}{len(data) / 1024:>6.1f}{text.count(chr(10)):>7}{ours:>10.1f}{full:>9.1f}"
            f"{naive:>10.0f}{naive / full:>8.0f}x{core:>7.1f}%"
        )
    print("parse = vLLM sample names only; read = parse + KV fallback + extract to a MetricsSnapshot;")
    print("naive = prometheus_client text_string_to_metric_families over the whole page;")
    print(f"core % = read time x {PAGES_PER_SECOND:.0f} pages/s (8 endpoints every 50 ms), HTTP not included.")


if __name__ == "__main__":
    main()
