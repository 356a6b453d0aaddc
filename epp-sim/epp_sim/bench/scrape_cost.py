"""What scraping costs the picker: the real ``ScraperManager`` alone in a process, measured by its CPU.

The picker polls every endpoint's ``/metrics`` (about 45 KB of vLLM text) every 50 ms. To see that
cost apart from request handling, this child process builds a datastore of ``count`` endpoints
(``127.0.0.<first>`` … on ``port``, numbered by :func:`~epp_sim.bench.backend.pod_host`, served
by ``epp_sim.bench.backend``), runs the production scraper on them (its keep-alive connections,
the real parser), lets it warm up, then reports the CPU seconds per wall second it used over
``duration`` seconds, with scrapes/s and errors, and how long a yield to the event loop's ready
queue waited meanwhile (p50 and p99): what each step of a request served on the same loop would.

Run as ``python -m epp_sim.bench.scrape_cost --count 8 --port P``; prints one JSON object.
:func:`measure_in_child` does that from the overhead benchmark and returns the object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from epp_sim.bench.children import output_of

__all__ = ["measure_in_child", "measure_scraping"]


async def measure_scraping(
    *, count: int, first: int, port: int, interval: float, warmup: float, duration: float
) -> dict[str, Any]:
    """Run the scraper over ``count`` endpoints; CPU seconds per second and scrapes per second."""
    from epp.clock import SystemClock
    from epp.datalayer.scraper import ScraperManager
    from epp.datastore.store import Datastore
    from epp.datastore.types import PodInfo, PoolSpec
    from epp.labels import Selector
    from epp.telemetry.metrics import EppMetrics
    from epp_sim.bench.backend import pod_host

    store = Datastore()
    labels = {"app": "bench"}
    pods = [
        PodInfo(name=f"pod-{i}", namespace="default", ip=pod_host(i, first), labels=labels, ready=True)
        for i in range(count)
    ]
    store.set_pool(
        PoolSpec(name="bench", namespace="default", selector=Selector.from_match_labels(labels), target_ports=(port,)),
        pods,
    )
    metrics = EppMetrics()
    scrapers = ScraperManager(store, SystemClock(), metrics, interval=interval)

    def totals() -> tuple[float, float]:
        scraped = metrics.registry.get_sample_value("epp_scrape_duration_seconds_count", {"engine": "vllm"}) or 0.0
        errors = sum(
            metrics.registry.get_sample_value("epp_scrape_errors_total", {"reason": r}) or 0.0
            for r in ("timeout", "http", "connect", "parse")
        )
        return scraped, errors

    lags: list[float] = []

    async def probe() -> None:
        """What one step of a request would wait: a yield to the back of the loop's ready queue, every 2 ms."""
        while True:
            await asyncio.sleep(0.002)
            started = time.perf_counter()
            await asyncio.sleep(0)
            lags.append(time.perf_counter() - started)

    try:
        await scrapers.start()
        await asyncio.sleep(warmup)
        scraped0, errors0 = totals()
        cpu0, wall0 = time.process_time(), time.perf_counter()
        async with asyncio.TaskGroup() as group:
            prober = group.create_task(probe(), name="scrape-cost-probe")
            await asyncio.sleep(duration)
            prober.cancel()
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        scraped, errors = totals()
    finally:
        await scrapers.stop()
    lags.sort()
    fresh = sum(1 for s in store.endpoints() if s.metrics.updated_at > 0)
    return {
        "endpoints": count,
        "interval_s": interval,
        "cpu_per_s": cpu / wall,
        "scrapes_per_s": (scraped - scraped0) / wall,
        "cpu_per_scrape_us": cpu / max(1.0, scraped - scraped0) * 1e6,
        "errors": int(errors - errors0),
        "endpoints_with_metrics": fresh,
        "loop_lag_p50_us": lags[len(lags) // 2] * 1e6 if lags else None,
        "loop_lag_p99_us": lags[len(lags) * 99 // 100] * 1e6 if lags else None,
        "duration_s": wall,
    }


async def measure_in_child(*, count: int, port: int, duration: float) -> dict[str, Any]:
    """:func:`measure_scraping` in a fresh child process (1 s warm-up), so nothing else shares its CPU."""
    out = await output_of(
        [
            sys.executable,
            "-m",
            "epp_sim.bench.scrape_cost",
            "--count",
            str(count),
            "--port",
            str(port),
            "--duration",
            str(duration),
            "--warmup",
            "1.0",
        ]
    )
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the scraper-cost child."""
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.scrape_cost", description=__doc__)
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--first", type=int, default=2)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--warmup", type=float, default=1.0)
    parser.add_argument("--duration", type=float, default=3.0)
    args = parser.parse_args(argv)
    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    result = asyncio.run(
        measure_scraping(
            count=args.count,
            first=args.first,
            port=args.port,
            interval=args.interval,
            warmup=args.warmup,
            duration=args.duration,
        )
    )
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
