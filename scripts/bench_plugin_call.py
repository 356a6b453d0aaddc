#!/usr/bin/env python3
"""Microbenchmark: does a scorer from an installed distribution cost more per call than the same scorer in-tree?

Three single-scorer profiles run the same scheduling cycle (the real ``Scheduler``, serving recorder
and metrics) over 8 and 64 endpoints with random metrics:

- ``out-of-tree``: the example distribution's ``custom-metric-scorer`` (``examples/zone-plugins``),
  found through its ``epp.plugins`` entry point and loaded by the configuration, as ``epp serve`` does;
- ``same, in-tree``: the very same factory registered directly on the registry, as the in-tree
  plugins are (same code, no entry point): the difference between the two is what being out of
  tree costs;
- ``running-requests-size-scorer``: the in-tree scorer doing the same work (min-max over one number
  per endpoint), for scale.

Each figure is the thread's CPU time per cycle (``time.thread_time``), so time the process spends
descheduled on a busy machine does not count; rounds are interleaved and each variant keeps its
best; the ratios compare within this run.
Usage: ``.venv/bin/python scripts/bench_plugin_call.py [--iterations N] [--rounds R]``.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.metadata import distributions
from pathlib import Path
from types import MappingProxyType

from epp.clock import SystemClock
from epp.config.installed_plugins import discover
from epp.config.loader import load_config
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import InferenceRequest
from epp.plugins import register_in_tree
from epp.scheduling.recorder import CycleMetrics
from epp.telemetry.metrics import EppMetrics
from epp_sim.plugin_dists import write_distribution

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "zone-plugins" / "src" / "epp_zone_example.py"
HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
EXAMPLE_PROFILE = "plugins: [{type: custom-metric-scorer, parameters: {attribute: load}}]\n"
IN_TREE_PROFILE = "plugins: [{type: running-requests-size-scorer}]\n"


def endpoints(n: int, rng: random.Random) -> list[EndpointState]:
    states = []
    for i in range(n):
        running = rng.randrange(0, 64)
        endpoint = Endpoint(
            namespace="default", name=f"pod-{i}-rank-0", pod_name=f"pod-{i}", address=f"10.0.0.{i}", port=8000
        )
        metrics = MetricsSnapshot(running=running, custom=MappingProxyType({"load": float(running)}))
        states.append(EndpointState(endpoint, metrics))
    return states


def installed_registry(site: Path) -> PluginRegistry:
    """The registry ``epp serve`` builds: in-tree types, then the example's through its entry points."""
    write_distribution(
        site,
        "epp-zone-example",
        plugins={"custom-metric-scorer": "epp_zone_example:CUSTOM_METRIC_SCORER"},
        modules={"epp_zone_example.py": EXAMPLE.read_text(encoding="utf-8")},
    )
    sys.path.insert(0, str(site))
    registry = PluginRegistry()
    register_in_tree(registry)
    discover(registry, distributions(path=[str(site)]))
    return registry


def in_tree_registry() -> PluginRegistry:
    """The same factory registered directly, as an in-tree type is."""
    import epp_zone_example  # on sys.path once installed_registry ran

    registry = PluginRegistry()
    register_in_tree(registry)
    registry.register("custom-metric-scorer", epp_zone_example.create_custom_metric_scorer)
    return registry


def cycle(registry: PluginRegistry, profile: str, states: list[EndpointState]) -> Callable[[], object]:
    metrics = EppMetrics()
    config = load_config(HEADER + profile, registry, PluginContext(clock=SystemClock(), seed=1))
    scheduler, recorder = config.scheduler.observed(metrics), CycleMetrics(metrics)  # as a pipeline in force runs it
    request = InferenceRequest(request_id="bench", model="m", target_model="m")
    return lambda: scheduler.schedule(request, states, None, recorder)


def cpu_us(fn: Callable[[], object], iterations: int) -> float:
    """CPU µs per call on this thread: time the thread was descheduled (a busy machine) does not count."""
    start = time.thread_time()
    for _ in range(iterations):
        fn()
    return (time.thread_time() - start) / iterations * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--iterations", type=int, default=20000)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as site:
        out_of_tree = installed_registry(Path(site))
        direct = in_tree_registry()
        print(f"{'endpoints':>9}  {'out-of-tree':>12}  {'same, in-tree':>14}  {'running-requests':>17}  ratio (out/in)")
        for n in (8, 64):
            states = endpoints(n, random.Random(n))
            runs = {
                "out": cycle(out_of_tree, EXAMPLE_PROFILE, states),
                "in": cycle(direct, EXAMPLE_PROFILE, states),
                "ref": cycle(direct, IN_TREE_PROFILE, states),
            }
            best = dict.fromkeys(runs, float("inf"))
            for fn in runs.values():  # warm-up
                cpu_us(fn, min(args.iterations, 2000))
            order = list(runs)
            for _ in range(args.rounds):  # interleaved, the order rotated: load and warmth hit every variant alike
                for name in order:
                    best[name] = min(best[name], cpu_us(runs[name], args.iterations))
                order.append(order.pop(0))
            ratio = best["out"] / best["in"]
            print(f"{n:>9}  {best['out']:>9.2f} µs  {best['in']:>11.2f} µs  {best['ref']:>14.2f} µs  {ratio:>13.3f}")


if __name__ == "__main__":
    main()
