"""The routing strategies compared, and how each one turns an arrival into a destination.

Every strategy but ``round-robin`` is an ``EndpointPickerConfig`` loaded with the in-tree plugin
registry into the production ``PoolRouting`` (the pool's pipeline, its endpoint observers, its flow
controller, health feedback from each response's status), exactly as ``epp serve`` builds it, and
each arrival's body is parsed by the configuration's parsers as a served request's is;
``round-robin`` is what a Kubernetes Service does, a baseline with no admission; ``flow-control``
is the default profile behind the ``flowControl`` gate (round-robin fairness between tenants, a
TTL of ``FLOW_CONTROL_TTL_WALL_S`` wall seconds), its requests waiting in the picker's queue. A strategy is
built into a :data:`Route`: the destination for one arrival, and what to call with its response's
status when it has finished (so health feedback and the PostResponse plugins run, as in ``epp serve``).

``approximate`` and ``precise`` are llm-d's sample weights (prefix 2, queue 1, KV 1) with the
approximate index or with ``token-producer`` → ``precise-prefix-cache-producer`` reading the
simulators' KV events; ``precise`` needs a workload whose cluster has the bench tokenizer
(:class:`RealTokens`). With ``replicas`` > 1, that many pickers each load the config (each its
own index and subscribers, fed by the same events) and arrivals alternate between them, as
Envoy spreads streams over ``epp serve`` replicas. ``approximate-valkey`` is ``approximate`` whose
replicas share state as ``epp serve --state-sync-address`` does: a real Valkey/Redis server
(:class:`~epp_sim.stack.valkey.ValkeyServer`) and each replica's
:class:`~epp.statesync.replicas.ReplicaSync` (prefix insertions and in-flight counts).

``aggregated`` and ``pd-<P>p<D>d`` compare disaggregated serving with aggregated pods at equal
pod count: ``aggregated`` is llm-d's sample weights on a pool of identical pods, ``pd-4p4d``
(``pd-6p2d``, …) the P/D configuration of ``manifests/overlays/pd`` on a pool whose first
servers × P/(P+D) pods are labelled prefill and the rest decode, each decode pod behind an
``epp sidecar`` (:func:`prefill_pods`). Its decider sends a request to a prefill pod first when
the decode pod lacks at least ``PD_NON_CACHED_TOKENS`` of its prompt, and the decision's stage
headers (``x-prefiller-host-port``) travel with the request to the sidecar, as Envoy forwards them.

``queue-kv`` is ``queue-scorer`` and ``kv-cache-utilization-scorer`` alone, weight 1 each; ``slo`` is
the llm-d router's SLO-aware profile (``predicted-latency-producer`` in streaming mode with the
embedded predictor, ``slo-headroom-tier-filter``, ``latency-scorer``, ``weighted-random-picker``,
``latency-slo-admitter``; ``slo-most`` the same with ``headroomSelectionStrategy: most``). The picker
runs in wall time while the simulators and the workload's
objectives are in simulated time, so each request's SLO headers are divided by the time scale on
their way to the picker; the predictor's models and samples are kept in a state file of the bench's
work directory, so each ``slo`` run starts from what the previous ones learnt (a warm replica).
"""

from __future__ import annotations

import itertools
import random
import re
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from prometheus_client import CollectorRegistry

from epp.clock import SystemClock
from epp.config.loader import LoadedConfig, load_config, load_default_config
from epp.datastore.store import Datastore
from epp.framework.headers import TPOT_SLO, TTFT_SLO
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.replication import SyncSettings
from epp.framework.request import InferenceRequest
from epp.framework.response import ResponseTiming, Usage
from epp.plugins import register_in_tree
from epp.requestcontrol.pool_routing import PoolRouting
from epp.statesync.metrics import SyncMetrics
from epp.statesync.replicas import ReplicaSync
from epp.telemetry.metrics import EppMetrics
from epp_sim.bench.workloads import Arrival
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.waits import wait_until

__all__ = [
    "AGGREGATED",
    "APPROXIMATE",
    "APPROXIMATE_VALKEY",
    "DEFAULT",
    "DEFAULT_STRATEGIES",
    "FLOW_CONTROL",
    "IN_FLIGHT",
    "LEARNING",
    "LEAST_QUEUE",
    "NEEDS_REAL_TOKENS",
    "PD_NON_CACHED_TOKENS",
    "PRECISE",
    "QUEUE_KV",
    "ROUND_ROBIN",
    "SLO",
    "SLO_MOST",
    "STRATEGIES",
    "RealTokens",
    "Route",
    "Routed",
    "prefill_pods",
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
APPROXIMATE_VALKEY = "approximate-valkey"
PRECISE = "precise"
QUEUE_KV = "queue-kv"
SLO = "slo"
SLO_MOST = "slo-most"
AGGREGATED = "aggregated"
PD_NON_CACHED_TOKENS = 1024
"""The P/D strategies' ``nonCachedTokens``: prompts shorter than this are prefilled where they are decoded."""
_PD_NAME = re.compile(r"pd-(\d+)p(\d+)d")
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
STRATEGIES[APPROXIMATE_VALKEY] = STRATEGIES[APPROXIMATE]
STRATEGIES[AGGREGATED] = STRATEGIES[APPROXIMATE]
_PD = (
    _HEADER.replace("inference.networking.x-k8s.io", "llm-d.ai")
    + f"""plugins:
- type: prefix-cache-scorer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: prefix-based-pd-decider
  parameters: {{nonCachedTokens: {PD_NON_CACHED_TOKENS}}}
- type: disagg-profile-handler
  parameters: {{deciders: {{prefill: prefix-based-pd-decider}}}}
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
  - {{pluginRef: prefix-cache-scorer, weight: 2}}
  - {{pluginRef: queue-scorer, weight: 1}}
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - {{pluginRef: prefix-cache-scorer, weight: 2}}
  - {{pluginRef: queue-scorer, weight: 1}}
  - {{pluginRef: kv-cache-utilization-scorer, weight: 1}}
"""
)
STRATEGIES["pd-4p4d"] = _PD
STRATEGIES["pd-6p2d"] = _PD
STRATEGIES[QUEUE_KV] = (
    _HEADER
    + """plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
"""
)
_SLO_PROFILE = """plugins:
- type: predicted-latency-producer
  parameters:
    streamingMode: true
    predictor: {embedded: {retrainInterval: 1s, minSamplesForRetrain: 50, stateFile: "$state"}}
- type: slo-headroom-tier-filter
- type: latency-scorer
  parameters: {headroomSelectionStrategy: STRATEGY}
- type: latency-slo-admitter
- type: weighted-random-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: slo-headroom-tier-filter
  - pluginRef: latency-scorer
  - pluginRef: weighted-random-picker
"""
STRATEGIES[SLO] = _HEADER + _SLO_PROFILE.replace("STRATEGY", "least")
STRATEGIES[SLO_MOST] = _HEADER + _SLO_PROFILE.replace("STRATEGY", "most")
LEARNING = frozenset({SLO, SLO_MOST})
"""Strategies whose predictor learns from the responses (their runs share its state file)."""

SHARED_STATE = frozenset({APPROXIMATE_VALKEY})
"""Strategies whose replicas share state through a Valkey/Redis server the bench starts."""

DEFAULT_STRATEGIES = (ROUND_ROBIN, "random", "least-queue", "legacy-v0.3", DEFAULT, "prefix-aware")
"""What a workload without its own strategies runs unless told (``overload``, ``bursty`` and
``cache-pressure`` name theirs: flow control, in-flight, approximate and precise)."""

NEEDS_REAL_TOKENS = frozenset({PRECISE})
"""Strategies that only run on a workload whose cluster has the bench tokenizer and KV events."""


def prefill_pods(strategy: str, servers: int) -> int:
    """How many of ``servers`` pods a ``pd-<P>p<D>d`` strategy labels prefill (0: not a P/D strategy).

    servers × P/(P+D), rounded, and at least one pod of each role (ValueError with fewer than 2).
    """
    match = _PD_NAME.fullmatch(strategy)
    if match is None:
        return 0
    if servers < 2:
        raise ValueError(f"strategy {strategy!r} needs at least 2 servers (a prefill and a decode pod)")
    p, d = int(match.group(1)), int(match.group(2))
    return min(servers - 1, max(1, round(servers * p / (p + d))))


Finished = Callable[[int, Usage | None, ResponseTiming | None], None]
"""Called once when an arrival's response has finished, with its HTTP status (0: none came), its usage and
its timing (``time.perf_counter()``: routed, first byte, end) when it completed."""


@dataclass(frozen=True, slots=True)
class Routed:
    """Where one arrival goes: ``host:port``, the headers the decision adds, what to call when it finished."""

    destination: str
    finished: Finished
    headers: Mapping[str, str] = field(default_factory=dict)


Route = Callable[[int, Arrival], Awaitable[Routed]]
"""(arrival index, arrival) → :class:`Routed`; awaited, because a request may wait in the
flow-control queue and data producers run before scheduling. Raises EppError when refused."""

_PATH = {":path": "/v1/chat/completions"}  # where the replay sends every arrival


@dataclass(frozen=True, slots=True)
class RealTokens:
    """What a real-token cluster runs with: the bench tokenizer's directory and the KV-event port."""

    tokenizer: Path
    events_port: int


@asynccontextmanager
async def _shared_state(strategy: str, pickers: list[PoolRouting]) -> AsyncIterator[None]:
    """For a :data:`SHARED_STATE` strategy, a Valkey server and every replica's sync, connected.

    The bench's replicas route over one datastore, so they already see each other's in-flight
    counts; each sync is given an empty datastore of its own so only prefix insertions travel
    (sharing the counts again would count them twice).
    """
    if strategy not in SHARED_STATE or len(pickers) < 2:
        yield
        return
    with tempfile.TemporaryDirectory(prefix="epp-bench-valkey-") as work:
        async with ValkeyServer(Path(work)) as server:
            settings = SyncSettings(server.url)
            syncs = [
                ReplicaSync(
                    p.key,
                    Datastore(),
                    settings,
                    p.config.plugins,
                    clock=SystemClock(),
                    metrics=SyncMetrics(CollectorRegistry()),
                    source=f"replica-{i}",
                )
                for i, p in enumerate(pickers)
            ]
            for sync in syncs:
                await sync.start()
            try:
                await wait_until(lambda: all(s.link.connected for s in syncs), timeout=20, message="replicas synced")
                yield
            finally:
                for sync in syncs:
                    await sync.stop()


def _config(strategy: str, seed: int, tokens: RealTokens | None, state: Path | None) -> LoadedConfig:
    registry = PluginRegistry()
    register_in_tree(registry)
    context = PluginContext(clock=SystemClock(), pool_name="sim", seed=seed)
    text = STRATEGIES[strategy]
    if text is None:
        return load_default_config(registry, context)
    if strategy in NEEDS_REAL_TOKENS:
        if tokens is None:
            raise ValueError(f"strategy {strategy!r} needs a workload with real tokens")
        text = Template(text).substitute(tokenizer=tokens.tokenizer, events_port=tokens.events_port)
    if strategy in LEARNING:
        if state is None:
            raise ValueError(f"strategy {strategy!r} needs a state file")
        text = Template(text).substitute(state=state)
    return load_config(text, registry, context)


def _picker(strategy: str, store: Datastore, seed: int, tokens: RealTokens | None, state: Path | None) -> PoolRouting:
    """One picker replica: its own configuration (plugins, indexes, subscribers) and routing, as ``epp serve``'s."""
    config = _config(strategy, seed, tokens, state)
    return PoolRouting(
        ("sim", "sim"), store, config, metrics=EppMetrics(), clock=SystemClock(), rng=random.Random(seed)
    )


@asynccontextmanager
async def router(
    strategy: str,
    store: Datastore,
    seed: int,
    *,
    replicas: int = 1,
    tokens: RealTokens | None = None,
    time_scale: float = 1.0,
    state: Path | None = None,
) -> AsyncIterator[Route]:
    """The :data:`Route` of ``strategy`` over the endpoints in ``store``, split over ``replicas`` pickers.

    ``seed`` fixes random choices (replica *i* uses ``seed + i``); a strategy with the
    ``flowControl`` gate runs its flow controllers for as long as the context; the pickers'
    subscribers and other closables are closed on exit.
    """
    if strategy == ROUND_ROBIN:
        turn = itertools.count()

        async def round_robin(index: int, arrival: Arrival) -> Routed:
            endpoints = store.endpoints()
            return Routed(endpoints[next(turn) % len(endpoints)].endpoint.hostport, _nothing)

        yield round_robin
        return
    pickers = [_picker(strategy, store, seed + i, tokens, state) for i in range(replicas)]
    for picker in pickers:
        await picker.start()

    async def route(index: int, arrival: Arrival) -> Routed:
        pipeline = pickers[index % len(pickers)].pipeline
        headers = {**arrival.headers, **_PATH}
        for name in (TTFT_SLO, TPOT_SLO):
            if name in headers:  # simulated ms → the picker's wall ms
                headers[name] = f"{float(headers[name]) / time_scale:g}"
        request = InferenceRequest(request_id=str(index), headers=headers)
        ctx = pipeline.parse(request, arrival.data, None)
        decision = await pipeline.route(ctx)

        def finished(status: int, usage: Usage | None, timing: ResponseTiming | None) -> None:
            if timing is not None:
                pipeline.response_complete(ctx, usage, status, timing)
            pipeline.finished(ctx, completed=status != 0, status=status)

        return Routed(decision.destination.split(",")[0], finished, decision.upstream_headers)

    try:
        async with _shared_state(strategy, pickers):
            yield route
    finally:
        for picker in pickers:
            await picker.stop()
            await picker.aclose()


def _nothing(status: int, usage: Usage | None, timing: ResponseTiming | None) -> None:
    return None
