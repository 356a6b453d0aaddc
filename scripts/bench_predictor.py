#!/usr/bin/env python3
"""Microbenchmark: what SLO-aware routing costs on the event loop, per request, by candidate count.

For 8, 32 and 64 endpoints (random queue / KV / in-flight load) and a trained embedded predictor
(the production one: LightGBM on a worker thread, then the numpy forest), in interleaved rounds:

- ``predict``: the batched prediction of TTFT and TPOT for every candidate (rows built from the
  features, the forest walked): what the issue's "≤ 200 µs for 32 endpoints" is about;
- ``produce``: ``predicted-latency-producer``'s whole produce step (features, prefix score,
  prediction, headroom per candidate);
- ``slo route`` / ``default route``: a request through the pool pipeline (route, then finished) with
  the SLO profile (producer, tier filter, latency scorer, admitter, weighted-random picker) and with
  the default profile, and their ratio.

Each number is the median over the rounds of the mean per call, in CPU µs of this process
(``time.process_time``: a busy shared machine inflates wall time, CPU time less so).
Usage: ``.venv/bin/python scripts/bench_predictor.py [--rounds 5] [--iterations 2000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from epp.clock import SystemClock
from epp.config.loader import load_config, load_default_config
from epp.datastore.store import Datastore
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import InferenceRequest
from epp.plugins import register_in_tree
from epp.plugins.predicted_latency_producer import PredictedLatencyProducer
from epp.requestcontrol.pool_routing import PoolRouting
from epp.slo.embedded import EmbeddedPredictor, EmbeddedSettings
from epp.slo.features import Features, Sample
from epp.slo.predictor import Predictor
from epp.telemetry.metrics import EppMetrics

sys.path.insert(0, str(Path(__file__).parent))
from bench_scheduler import make_store  # noqa: E402

SLO = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters: {{streamingMode: true, predictor: {{embedded: {{retrainInterval: 1h, stateFile: "{state}"}}}}}}
- type: slo-headroom-tier-filter
- type: latency-scorer
- type: latency-slo-admitter
- type: weighted-random-picker
schedulingProfiles:
- name: default
  plugins:
  - {{pluginRef: slo-headroom-tier-filter}}
  - {{pluginRef: latency-scorer}}
  - {{pluginRef: weighted-random-picker}}
"""
HEADERS = {"x-llm-d-slo-ttft-ms": "200", "x-llm-d-slo-tpot-ms": "40"}


async def trained_state(path: Path) -> None:
    """A predictor trained on 5,000 samples of a queue + prefill latency law, saved where the config reads it."""
    rng = random.Random(1)
    predictor = EmbeddedPredictor(EmbeddedSettings(retrain_interval=3600, state_file=str(path)), seed=1)
    for _ in range(5000):
        f = Features(rng.random(), rng.randint(50, 4000), rng.randint(0, 9), rng.randint(0, 60), rng.random(), 0)
        ttft = (30 * f.num_request_waiting + 0.05 * f.input_token_length + 10) * rng.lognormvariate(0, 0.25)
        predictor.observe(Sample(f, ttft, (10 + 0.1 * f.num_request_running) * rng.lognormvariate(0, 0.1)))
    assert await predictor.train_now()
    await predictor.aclose()


async def cpu_us(fn: Callable[[], Awaitable[object]], iterations: int) -> float:
    start = time.process_time()
    for _ in range(iterations):
        await fn()
    return (time.process_time() - start) / iterations * 1e6


async def bench(rounds: int, iterations: int) -> None:
    registry = PluginRegistry()
    register_in_tree(registry)
    with tempfile.TemporaryDirectory() as work:
        state = Path(work) / "predictor.npz"
        await trained_state(state)
        head = ("endpoints", "predict", "produce", "slo route", "default route", "ratio")
        print("  ".join(f"{h:>{w}}" for h, w in zip(head, (9, 9, 9, 10, 13, 5), strict=True)))
        for n in (8, 32, 64):
            await one_size(n, registry, state, rounds, iterations)


async def one_size(n: int, registry: PluginRegistry, state: Path, rounds: int, iterations: int) -> None:
    clock = SystemClock()
    rng = random.Random(n)
    store: Datastore = make_store(n, clock, rng)
    for s in store.endpoints():
        s.metrics = MetricsSnapshot(
            waiting_queue=rng.randrange(0, 10), kv_cache_usage=rng.random(), updated_at=clock.now() + 3600
        )
        s.in_flight_requests = rng.randrange(0, 20)
        s.in_flight_tokens = rng.randrange(0, 20000)
    routings = {}
    for name in ("slo", "default"):
        metrics = EppMetrics()
        context = PluginContext(clock=clock, seed=1)
        config = (
            load_config(SLO.format(state=state), registry, context)
            if name == "slo"
            else load_default_config(registry, context)
        )
        routings[name] = PoolRouting(
            ("default", "bench"), store, config, metrics=metrics, clock=clock, rng=random.Random(2)
        )
    producer = routings["slo"].config.plugins["predicted-latency-producer"]
    assert isinstance(producer, PredictedLatencyProducer) and producer.predictor is not None
    predictor: Predictor = producer.predictor
    candidates = store.endpoints()
    request = InferenceRequest(request_id="r", size=4000)
    for _ in range(3000):  # the saved model loads on the predictor's worker thread
        if await predictor.predict(producer.rows(request, candidates)) is not None:
            break
        await asyncio.sleep(0.01)

    async def predict() -> object:
        return await predictor.predict(producer.rows(request, candidates))

    async def produce() -> object:
        await producer.produce(InferenceRequest(request_id="r", headers=HEADERS, size=4000), candidates)
        return None

    variants = {
        "predict": predict,
        "produce": produce,
        "slo": router(routings["slo"]),
        "default": router(routings["default"]),
    }
    results: dict[str, list[float]] = {k: [] for k in variants}
    for fn in variants.values():
        await cpu_us(fn, min(iterations, 200))  # warm-up
    for _ in range(rounds):
        for key, fn in variants.items():
            results[key].append(await cpu_us(fn, iterations))
    m = {k: statistics.median(v) for k, v in results.items()}
    print(
        f"{n:>9}  {m['predict']:>6.1f} µs  {m['produce']:>6.1f} µs  {m['slo']:>7.1f} µs  "
        f"{m['default']:>10.1f} µs  {m['slo'] / m['default']:>5.2f}"
    )
    for routing in routings.values():
        await routing.aclose()


def router(routing: PoolRouting) -> Callable[[], Awaitable[object]]:
    """A request through the pool pipeline: route, then finished."""

    async def route() -> object:
        pipeline = routing.pipeline
        request = InferenceRequest(request_id="bench", model="m", headers=dict(HEADERS), size=4000)
        ctx = pipeline.context(request, None)
        decision = await pipeline.route(ctx)
        pipeline.finished(ctx, completed=True, status=200)
        return decision

    return route


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=2000)
    args = parser.parse_args()
    asyncio.run(bench(args.rounds, args.iterations))


if __name__ == "__main__":
    main()
