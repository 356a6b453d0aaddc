"""The routing strategies compared, and how each one turns an arrival into a destination.

Every strategy but ``round-robin`` is an ``EndpointPickerConfig`` loaded with the in-tree plugin
registry and run through the production ``PoolDirector``, exactly as ``epp serve`` would run it;
``round-robin`` is what a Kubernetes Service does, a baseline with no admission; ``flow-control``
is the default profile behind the ``flowControl`` gate (round-robin fairness between tenants, a
TTL of ``FLOW_CONTROL_TTL_WALL_S`` wall seconds), its requests waiting in the picker's queue. A strategy is
built into a :data:`Route`: the destination for one arrival, and what to call when its response
has finished (so the PostResponse plugins run, as they do in ``epp serve``).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from epp.clock import SystemClock
from epp.config.loader import LoadedConfig, load_config, load_default_config
from epp.datastore.store import Datastore
from epp.flowcontrol.controller import FlowController
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import ApiKind, InferenceRequest, RoutingDecision
from epp.plugins import register_in_tree
from epp.requestcontrol.director import PoolDirector
from epp.telemetry.metrics import EppMetrics
from epp_sim.bench.workloads import Arrival

__all__ = [
    "DEFAULT",
    "DEFAULT_STRATEGIES",
    "FLOW_CONTROL",
    "IN_FLIGHT",
    "LEAST_QUEUE",
    "ROUND_ROBIN",
    "STRATEGIES",
    "Route",
    "router",
]

_HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
ROUND_ROBIN = "round-robin"
DEFAULT = "default"
FLOW_CONTROL = "flow-control"
FLOW_CONTROL_TTL_WALL_S = 1.0
"""The flow-control strategy's ``defaultRequestTTL``, in wall seconds (×``time_scale`` simulated)."""
LEAST_QUEUE = "least-queue"
IN_FLIGHT = "in-flight"
STRATEGIES: dict[str, str | None] = {
    ROUND_ROBIN: None,
    "random": _HEADER + "plugins:\n- type: random-picker\n",
    LEAST_QUEUE: _HEADER + "plugins:\n- type: queue-scorer\n- type: max-score-picker\n",
    "legacy-v0.3": _HEADER + "plugins:\n- type: legacy-filter-tree\n- type: random-picker\n",
    DEFAULT: None,
    FLOW_CONTROL: _HEADER.replace("inference.networking.x-k8s.io", "llm-d.ai")
    + f"""featureGates: [flowControl]
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: lora-affinity-scorer
- type: max-score-picker
- type: round-robin-fairness-policy
schedulingProfiles:
- name: default
  plugins:
  - {{pluginRef: queue-scorer, weight: 2}}
  - {{pluginRef: kv-cache-utilization-scorer, weight: 2}}
  - {{pluginRef: prefix-cache-scorer, weight: 3}}
  - {{pluginRef: lora-affinity-scorer, weight: 1}}
  - pluginRef: max-score-picker
flowControl:
  defaultRequestTTL: {FLOW_CONTROL_TTL_WALL_S}s
  defaultPriorityBand: {{fairnessPolicyRef: round-robin-fairness-policy}}
""",
    "prefix-aware": _HEADER
    + """plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
- type: lora-affinity-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 5}
  - {pluginRef: lora-affinity-scorer, weight: 1}
  - pluginRef: max-score-picker
""",
    IN_FLIGHT: _HEADER
    + """plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: active-request-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: active-request-scorer, weight: 2}
  - pluginRef: max-score-picker
""",
}
"""Strategy name → EndpointPickerConfig (None: round robin's baseline, or the default profile)."""

DEFAULT_STRATEGIES = (ROUND_ROBIN, "random", "least-queue", "legacy-v0.3", DEFAULT, "prefix-aware")
"""What ``epp bench routing`` runs unless told (``flow-control`` is for the ``overload`` workload)."""

Route = Callable[[int, Arrival], Awaitable[tuple[str, Callable[[], None]]]]
"""(arrival index, arrival) → (``host:port`` to send it to, call when its response has finished);
awaited, because a request may wait in the flow-control queue. Raises EppError when refused."""


def _config(strategy: str, seed: int, metrics: EppMetrics) -> LoadedConfig:
    registry = PluginRegistry()
    register_in_tree(registry)
    context = PluginContext(clock=SystemClock(), pool_name="sim", seed=seed)
    text = STRATEGIES[strategy]
    if text is None:
        return load_default_config(registry, context, metrics=metrics)
    return load_config(text, registry, context, metrics=metrics)


@asynccontextmanager
async def router(strategy: str, store: Datastore, seed: int) -> AsyncIterator[Route]:
    """The :data:`Route` of ``strategy`` over the endpoints in ``store``; ``seed`` fixes its random choices.

    A strategy with the ``flowControl`` gate runs its flow controller for as long as the context.
    """
    if strategy == ROUND_ROBIN:
        turn = itertools.count()

        async def round_robin(index: int, arrival: Arrival) -> tuple[str, Callable[[], None]]:
            endpoints = store.endpoints()
            return endpoints[next(turn) % len(endpoints)].endpoint.hostport, _nothing

        yield round_robin
        return
    metrics = EppMetrics()
    clock = SystemClock()
    config = _config(strategy, seed, metrics)
    flow_control = None
    if config.flow_control is not None:
        flow_control = FlowController(
            config.flow_control,
            pool_name="sim",
            endpoints=store.endpoints,
            detector=lambda: config.saturation_detector,
            clock=clock,
            metrics=metrics,
        )
        await flow_control.start()
    director = PoolDirector(store, lambda: config, metrics, clock, random.Random(seed), flow_control=flow_control)

    async def route(index: int, arrival: Arrival) -> tuple[str, Callable[[], None]]:
        request = InferenceRequest(
            request_id=str(index),
            model=arrival.model,
            api=ApiKind.CHAT_COMPLETIONS,
            stream=True,
            body=arrival.body,
            headers=arrival.headers,
            size=len(arrival.data),
        )
        routed = director.route(request, None)
        decision = routed if isinstance(routed, RoutingDecision) else await routed
        return decision.targets[0].endpoint.hostport, lambda: director.finished(request, decision, completed=True)

    try:
        yield route
    finally:
        if flow_control is not None:
            await flow_control.stop()


def _nothing() -> None:
    return None
