"""The simulated cluster a routing run measures: its child process, the picker's view of it, its counters.

N vLLM simulators (``epp_sim.bench.simcluster``) on ``127.0.0.2`` … sharing one port, restarted
for every run so each strategy starts with cold caches and zeroed counters. The picker sees them
as the endpoints of one pool in a ``Datastore``, as ``epp serve`` would after its reconcilers
ran (labelled as llm-d's pod discovery expects). A real-token cluster (``RealTokens``) runs the
bench tokenizer and publishes KV events on ``tcp://<its IP>:<events port>``. Their own counters
(prefix-cache hits and queries, requests, end-to-end latency) are the truth the client's
measurements are checked against.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import aiohttp

from epp.datalayer.promtext import parse
from epp.datastore.store import Datastore
from epp.datastore.types import ObjectiveSpec, PodInfo, PoolSpec
from epp.labels import Selector
from epp_sim.bench.children import http_ok, python_child
from epp_sim.bench.routing.strategies import RealTokens
from epp_sim.bench.workloads import ADAPTERS, BASE_MODEL, CRITICAL_OBJECTIVE, SHEDDABLE_OBJECTIVE
from epp_sim.modelserver import SimConfig
from epp_sim.stack.processes import ChildProcess

__all__ = ["bench_sim_config", "counters_since", "pool_store", "server_counters", "start_cluster"]

_POOL_LABELS = {"app": "sim-bench", "llm-d.ai/inference-serving": "true"}
_E2E = ["vllm:e2e_request_latency_seconds_sum", "vllm:e2e_request_latency_seconds_count"]


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
) -> ChildProcess:
    """Start ``servers`` simulators on ``port`` and return once the last one answers ``/health``.

    ``num_gpu_blocks`` overrides the KV cache of :func:`bench_sim_config`.
    """
    config = bench_sim_config(time_scale)
    fields: dict[str, Any] = {
        "lora_modules": dict(config.lora_modules),
        "max_loras": config.max_loras,
        "num_gpu_blocks": num_gpu_blocks or config.num_gpu_blocks,
        "time_scale": config.time_scale,
    }
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


def pool_store(servers: int, port: int) -> Datastore:
    """A datastore holding the simulators as one ready pool, and the workloads' objectives."""
    store = Datastore()
    pods = [
        PodInfo(name=f"sim-{i}", namespace="default", ip=f"127.0.0.{2 + i}", labels=_POOL_LABELS, ready=True)
        for i in range(servers)
    ]
    selector = Selector.from_match_labels(_POOL_LABELS)
    store.set_pool(PoolSpec(name="sim", namespace="default", selector=selector, target_ports=(port,)), pods)
    store.set_objective(ObjectiveSpec(name=SHEDDABLE_OBJECTIVE, namespace="default", priority=-1))
    store.set_objective(ObjectiveSpec(name=CRITICAL_OBJECTIVE, namespace="default", priority=10))
    return store


async def server_counters(session: aiohttp.ClientSession, servers: int, port: int) -> dict[str, Any]:
    """Prefix-cache counters, requests per server and the simulators' own end-to-end latency sum."""
    hits = queries = 0
    e2e_sum = e2e_count = 0.0
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
        samples = parse(text, _E2E).samples
        e2e_sum += sum(s.value for s in samples.get(_E2E[0], []))
        e2e_count += sum(s.value for s in samples.get(_E2E[1], []))
    return {
        "prefix_hits": hits,
        "prefix_queries": queries,
        "per_server_requests": per_server,
        "server_e2e_sum": e2e_sum,
        "server_e2e_count": e2e_count,
    }


def counters_since(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """What the counters grew by since ``before`` (empty: since start); requests per server are totals."""
    counters = {k: v - before.get(k, 0) for k, v in after.items() if k != "per_server_requests"}
    counters["per_server_requests"] = after["per_server_requests"]
    return counters
