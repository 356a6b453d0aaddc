#!/usr/bin/env python3
"""Microbenchmark: µs per request through the pool's pipeline (route, then finished) with the default
profile vs a plain random choice.

Runs on the real Datastore, PoolRouting, EppMetrics and default config (metrics recording included),
with random queue/KV/LoRA metrics on 8 and 64 endpoints, on an event loop.
Usage: ``.venv/bin/python scripts/bench_scheduler.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time
from collections.abc import Awaitable, Callable

from epp.clock import SystemClock
from epp.config.loader import load_default_config
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.labels import Selector
from epp.plugins import register_in_tree
from epp.requestcontrol.pool_routing import PoolRouting
from epp.telemetry.metrics import EppMetrics


def make_store(n: int, clock: SystemClock, rng: random.Random) -> Datastore:
    store = Datastore()
    pool = PoolSpec(
        name="bench", namespace="default", selector=Selector.from_match_labels({"app": "m"}), target_ports=(8000,)
    )
    pods = [
        PodInfo(name=f"pod-{i}", namespace="default", ip=f"10.0.{i // 250}.{i % 250}", labels={"app": "m"}, ready=True)
        for i in range(n)
    ]
    store.set_pool(pool, pods)
    for s in store.endpoints():
        s.metrics = MetricsSnapshot(
            waiting_queue=rng.randrange(0, 10),
            kv_cache_usage=rng.random(),
            active_adapters=frozenset({f"lora-{rng.randrange(4)}"}),
            max_adapters=4,
            updated_at=clock.now() + 3600,  # stays fresh for the whole run
        )
    return store


async def per_call_us(fn: Callable[[], Awaitable[object]], iterations: int) -> float:
    for _ in range(min(iterations, 2000)):
        await fn()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(iterations):
            await fn()
        best = min(best, (time.perf_counter() - start) / iterations)
    return best * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--iterations", type=int, default=20000)
    asyncio.run(bench(parser.parse_args().iterations))


async def bench(iterations: int) -> None:
    clock = SystemClock()
    registry = PluginRegistry()
    register_in_tree(registry)
    print(f"{'endpoints':>9}  {'pipeline route':>15}  {'random.choice':>14}")
    for n in (8, 64):
        rng = random.Random(n)
        store = make_store(n, clock, rng)
        metrics = EppMetrics()
        config = load_default_config(registry, PluginContext(clock=clock, seed=1))
        routing = PoolRouting(("default", "bench"), store, config, metrics=metrics, clock=clock, rng=random.Random(2))

        async def route(routing: PoolRouting = routing) -> object:
            pipeline = routing.pipeline
            ctx = pipeline.context(InferenceRequest(request_id="bench", model="lora-1", headers={}), None)
            decision = await pipeline.route(ctx)
            pipeline.finished(ctx, completed=True, status=200)
            return decision

        async def baseline(store: Datastore = store, rng: random.Random = rng) -> object:
            return RoutingDecision([rng.choice(store.endpoints())])

        routed, chosen = await per_call_us(route, iterations), await per_call_us(baseline, iterations)
        print(f"{n:>9}  {routed:>12.1f} µs  {chosen:>11.2f} µs")


if __name__ == "__main__":
    main()
