"""The simulated cluster a routing run measures: its child process, the picker's view of it, its counters.

N vLLM simulators (``epp_sim.bench.simcluster``) on ``127.0.0.2`` … sharing one port, restarted
for every run so each strategy starts with cold caches and zeroed counters. The picker sees them
as the endpoints of one pool in a ``Datastore``, as ``epp serve`` would after its reconcilers
ran (labelled as llm-d's pod discovery expects). A real-token cluster (``RealTokens``) runs the
bench tokenizer and publishes KV events on ``tcp://<its IP>:<events port>``. A disaggregated
cluster (``roles``) labels each pod ``llm-d.ai/role: prefill`` or ``decode``; a decode pod's
simulator listens on an engine port of its own behind an ``epp sidecar`` on the pool's port. Their
own counters (prefix-cache hits and queries, requests, end-to-end latency, KV pulled from a
prefill pod) are the truth the client's measurements are checked against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp

from epp.datalayer.promtext import parse
from epp.datastore.store import Datastore
from epp.datastore.types import ObjectiveSpec, PodInfo, PoolSpec
from epp.framework.roles import PREFILL, ROLE_LABEL
from epp.labels import Selector
from epp_sim.bench.children import http_ok, python_child
from epp_sim.bench.routing.strategies import RealTokens
from epp_sim.bench.workloads import ADAPTERS, BASE_MODEL, CRITICAL_OBJECTIVE, SHEDDABLE_OBJECTIVE
from epp_sim.modelserver import SimConfig
from epp_sim.stack.processes import ChildProcess

__all__ = ["bench_sim_config", "counters_since", "pool_store", "server_counters", "start_cluster"]

_POOL_LABELS = {"app": "sim-bench", "llm-d.ai/inference-serving": "true"}
_E2E = ["vllm:e2e_request_latency_seconds_sum", "vllm:e2e_request_latency_seconds_count"]
_REMOTE_PREFILLS = "sim_pd_remote_prefill_requests_total"


def bench_sim_config(time_scale: float) -> SimConfig:
    """The simulated server: simulator defaults (an 8B-class model), 4 LoRA adapters in 2 slots,
    and a 4,096-block (65k-token) KV cache, so the tenants' system prompts outgrow one server."""
    return SimConfig(
        lora_modules={name: f"/adapters/{name}" for name in ADAPTERS},
        max_loras=2,
        num_gpu_blocks=4096,
        time_scale=time_scale,
    )


async def start_cluster(
    *,
    servers: int,
    time_scale: float,
    port: int,
    work: Path,
    tokens: RealTokens | None = None,
    num_gpu_blocks: int | None = None,
    max_num_batched_tokens: int | None = None,
    roles: Sequence[str] = (),
    engine_port: int = 0,
) -> ChildProcess:
    """Start ``servers`` simulators on ``port`` and return once the last one answers ``/health``.

    ``num_gpu_blocks`` and ``max_num_batched_tokens`` override :func:`bench_sim_config`'s;
    ``roles`` (one per server) makes the cluster disaggregated, each decode pod's simulator on
    ``engine_port`` behind a sidecar on ``port``.
    """
    config = bench_sim_config(time_scale)
    fields: dict[str, Any] = {
        "lora_modules": dict(config.lora_modules),
        "max_loras": config.max_loras,
        "num_gpu_blocks": num_gpu_blocks or config.num_gpu_blocks,
        "time_scale": config.time_scale,
    }
    if max_num_batched_tokens is not None:
        fields["max_num_batched_tokens"] = max_num_batched_tokens
    if tokens is not None:
        fields["tokenizer"] = str(tokens.tokenizer)
        fields["kv_events"] = {
            "enable_kv_cache_events": True,
            "endpoint": f"tcp://*:{tokens.events_port}",
            "topic": f"kv@sim@{BASE_MODEL}",  # the pod part is the endpoint's, as llm-d reads it
        }
    child = python_child(
        work,
        "simcluster",
        "epp_sim.bench.simcluster",
        "--count",
        str(servers),
        "--port",
        str(port),
        "--config",
        json.dumps(fields),
        *(("--roles", ",".join(roles), "--engine-port", str(engine_port)) if roles else ()),
    )
    await child.start()
    last = f"http://127.0.0.{1 + servers}:{port}/health"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=1)) as probe:
        try:
            await child.wait_ready(lambda: http_ok(probe, last), timeout=30)
        except BaseException:
            await child.stop()
            raise
    return child


def pool_store(servers: int, port: int, roles: Sequence[str] = ()) -> Datastore:
    """A datastore holding the simulators as one ready pool (each labelled with its role, if any),
    and the workloads' objectives."""
    store = Datastore()
    pods = [
        PodInfo(
            name=f"sim-{i}",
            namespace="default",
            ip=f"127.0.0.{2 + i}",
            labels={**_POOL_LABELS, ROLE_LABEL: roles[i]} if roles else _POOL_LABELS,
            ready=True,
        )
        for i in range(servers)
    ]
    selector = Selector.from_match_labels(_POOL_LABELS)
    store.set_pool(PoolSpec(name="sim", namespace="default", selector=selector, target_ports=(port,)), pods)
    store.set_objective(ObjectiveSpec(name=SHEDDABLE_OBJECTIVE, namespace="default", priority=-1))
    store.set_objective(ObjectiveSpec(name=CRITICAL_OBJECTIVE, namespace="default", priority=10))
    return store


async def server_counters(
    session: aiohttp.ClientSession, servers: int, port: int, roles: Sequence[str] = ()
) -> dict[str, Any]:
    """Prefix-cache counters, requests per server, the simulators' own end-to-end latency sum and
    the requests decoded with KV pulled from a prefill pod.

    A prefill pod's end-to-end latencies are summed but not counted: its prefill is one leg of a
    request the decode pod counts, so the mean stays per client request.
    """
    hits = queries = 0
    e2e_sum = e2e_count = remote = 0.0
    per_server = []
    for i in range(servers):
        base = f"http://127.0.0.{2 + i}:{port}"
        async with session.get(f"{base}/_sim/stats") as resp:
            stats = await resp.json()
        hits += stats["prefix_cache_hits"]
        queries += stats["prefix_cache_queries"]
        per_server.append(stats["requests"])
        async with session.get(f"{base}/metrics") as resp:
            text = await resp.read()
        samples = parse(text, [*_E2E, _REMOTE_PREFILLS]).samples
        e2e_sum += sum(s.value for s in samples.get(_E2E[0], []))
        if not roles or roles[i] != PREFILL:
            e2e_count += sum(s.value for s in samples.get(_E2E[1], []))
        remote += sum(s.value for s in samples.get(_REMOTE_PREFILLS, []))
    return {
        "prefix_hits": hits,
        "prefix_queries": queries,
        "per_server_requests": per_server,
        "server_e2e_sum": e2e_sum,
        "server_e2e_count": e2e_count,
        "remote_prefills": remote,
    }


def counters_since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What the counters grew by since ``before`` (empty: since start); requests per server are totals."""
    counters = {k: v - before.get(k, 0) for k, v in after.items() if k != "per_server_requests"}
    counters["per_server_requests"] = after["per_server_requests"]
    return counters
