"""The routing strategies compared, and how each one turns an arrival into a destination.

Every strategy but ``round-robin`` is an ``EndpointPickerConfig`` loaded with the in-tree plugin
registry and run through the production ``PoolDirector``, exactly as ``epp serve`` would run it;
``round-robin`` is what a Kubernetes Service does, a baseline with no admission; ``flow-control``
is the default profile behind the ``flowControl`` gate (round-robin fairness between tenants, a
TTL of ``FLOW_CONTROL_TTL_WALL_S`` wall seconds), its requests waiting in the picker's queue. A strategy is
built into a :data:`Route`: the destination for one arrival, and what to call when its response
has finished (so the PostResponse plugins run, as they do in ``epp serve``).

``approximate`` and ``precise`` are llm-d's sample weights (prefix 2, queue 1, KV 1) with the
approximate index or with ``token-producer`` → ``precise-prefix-cache-producer`` reading the
simulators' KV events; ``precise`` needs a workload whose cluster has the bench tokenizer
(:class:`RealTokens`). With ``replicas`` > 1, that many pickers each load the config (each its
own index and subscribers, fed by the same events) and arrivals alternate between them, as
Envoy spreads streams over ``epp serve`` replicas.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from string import Template

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
    "APPROXIMATE",
    "DEFAULT",
    "DEFAULT_STRATEGIES",
    "FLOW_CONTROL",
    "IN_FLIGHT",
    "LEAST_QUEUE",
    "NEEDS_REAL_TOKENS",
    "PRECISE",
    "ROUND_ROBIN",
    "STRATEGIES",
    "RealTokens",
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
APPROXIMATE = "approximate"
PRECISE = "precise"
_LLM_D_WEIGHTS = """schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: prefix-cache-scorer, weight: 2}
  - {pluginRef: queue-scorer, weight: 1}
  - {pluginRef: kv-cache-utilization-scorer, weight: 1}
  - pluginRef: max-score-picker
"""
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
    APPROXIMATE: _HEADER
    + """plugins:
- type: prefix-cache-scorer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
"""
    + _LLM_D_WEIGHTS,
    PRECISE: _HEADER
    + """plugins:
- type: token-producer
  parameters: {local: {tokenizerPath: "$tokenizer"}}
- type: precise-prefix-cache-producer
  parameters:
    speculativeIndexing: true
    kvEventsConfig:
      podDiscoveryConfig: {socketPort: $events_port}
- type: prefix-cache-scorer
  parameters: {prefixMatchInfoProducerName: precise-prefix-cache-producer}
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
"""
    + _LLM_D_WEIGHTS,
}
"""Strategy name → EndpointPickerConfig (None: round robin's baseline, or the default profile)."""

DEFAULT_STRATEGIES = (ROUND_ROBIN, "random", "least-queue", "legacy-v0.3", DEFAULT, "prefix-aware")
"""What a workload without its own strategies runs unless told (``overload``, ``bursty`` and
``cache-pressure`` name theirs: flow control, in-flight, approximate and precise)."""

NEEDS_REAL_TOKENS = frozenset({PRECISE})
"""Strategies that only run on a workload whose cluster has the bench tokenizer and KV events."""

Route = Callable[[int, Arrival], Awaitable[tuple[str, Callable[[], None]]]]
"""(arrival index, arrival) → (``host:port`` to send it to, call when its response has finished);
awaited, because data producers run first and a request may wait in the flow-control queue.
Raises EppError when refused."""


@dataclass(frozen=True, slots=True)
class RealTokens:
    """What a real-token cluster runs with: the bench tokenizer's directory and the KV-event port."""

    tokenizer: Path
    events_port: int


def _config(strategy: str, seed: int, metrics: EppMetrics, tokens: RealTokens | None) -> LoadedConfig:
    registry = PluginRegistry()
    register_in_tree(registry)
    context = PluginContext(clock=SystemClock(), pool_name="sim", seed=seed)
    text = STRATEGIES[strategy]
    if text is None:
        return load_default_config(registry, context, metrics=metrics)
    if strategy in NEEDS_REAL_TOKENS:
        if tokens is None:
            raise ValueError(f"strategy {strategy!r} needs a workload with real tokens")
        text = Template(text).substitute(tokenizer=tokens.tokenizer, events_port=tokens.events_port)
    return load_config(text, registry, context, metrics=metrics)


@dataclass
class _Picker:
    """One picker replica: its own config (plugins, indexes, subscribers), flow controller and director."""

    config: LoadedConfig
    director: PoolDirector
    flow_control: FlowController | None


def _picker(strategy: str, store: Datastore, seed: int, tokens: RealTokens | None) -> _Picker:
    metrics = EppMetrics()
    clock = SystemClock()
    config = _config(strategy, seed, metrics, tokens)
    endpoints = store.endpoints()
    for observer in config.endpoints_added:  # as the runtime does once the pool's endpoints are known
        observer.endpoints_added(endpoints)
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
    director = PoolDirector(store, lambda: config, metrics, clock, random.Random(seed), flow_control=flow_control)
    return _Picker(config, director, flow_control)


def _request(index: int, arrival: Arrival) -> InferenceRequest:
    return InferenceRequest(
        request_id=str(index),
        model=arrival.model,
        api=ApiKind.CHAT_COMPLETIONS,
        stream=True,
        body=arrival.body,
        headers=arrival.headers,
        size=len(arrival.data),
    )


@asynccontextmanager
async def router(
    strategy: str, store: Datastore, seed: int, *, replicas: int = 1, tokens: RealTokens | None = None
) -> AsyncIterator[Route]:
    """The :data:`Route` of ``strategy`` over the endpoints in ``store``, split over ``replicas`` pickers.

    ``seed`` fixes random choices (replica *i* uses ``seed + i``); a strategy with the
    ``flowControl`` gate runs its flow controllers for as long as the context; the pickers'
    subscribers and other closables are closed on exit.
    """
    if strategy == ROUND_ROBIN:
        turn = itertools.count()

        async def round_robin(index: int, arrival: Arrival) -> tuple[str, Callable[[], None]]:
            endpoints = store.endpoints()
            return endpoints[next(turn) % len(endpoints)].endpoint.hostport, _nothing

        yield round_robin
        return
    pickers = [_picker(strategy, store, seed + i, tokens) for i in range(replicas)]
    for picker in pickers:
        if picker.flow_control is not None:
            await picker.flow_control.start()

    async def route(index: int, arrival: Arrival) -> tuple[str, Callable[[], None]]:
        director = pickers[index % len(pickers)].director
        request = _request(index, arrival)
        prepared = director.prepare(request)
        if prepared is not None:
            await prepared
        routed = director.route(request, None)
        decision = routed if isinstance(routed, RoutingDecision) else await routed
        return decision.targets[0].endpoint.hostport, lambda: director.finished(request, decision, completed=True)

    try:
        yield route
    finally:
        for picker in pickers:
            if picker.flow_control is not None:
                await picker.flow_control.stop()
            for closable in picker.config.closables:
                await closable.aclose()


def _nothing() -> None:
    return None
