"""``--workers 2``: two serving processes share one ext_proc port behind a real Envoy and route as one picker.

The parent (the in-process runtime) scrapes; the child is fed its scrapes, so both route on the
same metrics. A prefix one process learns reaches the other through the parent, so a
conversation's later turns follow its first whichever process routes them. ``/metrics`` is the
parent's with the child's request series added: the pod's totals count every request once.
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
from collections.abc import Mapping, Sized

import aiohttp
from picker_configs import PREFIX_ONLY
from prometheus_client.parser import text_string_to_metric_families

from epp.plugins.approx_prefix_producer import ApproxPrefixCacheProducer
from epp.statesync.replicas import ReplicaSync
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.waits import wait_until

MODEL = SimConfig().model
CONFIG = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: prefix-cache-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: queue-scorer}, {pluginRef: prefix-cache-scorer, weight: 3}, {pluginRef: max-score-picker}]
"""


async def _two_workers(epp_pool: PoolFactory, tmp_path: object, config_text: str, *more: str) -> HermeticPool:
    """A pool of three behind Envoy (one stream per connection to the picker) and a picker of two workers."""
    config = f"{tmp_path}/config.yaml"
    await asyncio.to_thread(lambda: open(config, "w").write(config_text))  # noqa: SIM115,PTH123 (a test's file)
    env = await epp_pool(
        "v1",
        pods=3,
        envoy=True,
        envoy_streams_per_connection=1,
        picker_args=["--config-file", config, "--workers", "2", *more],
    )
    assert env.runtime.workers is not None
    return env


async def _metrics(http: aiohttp.ClientSession, port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
        assert resp.status == 200
        text = await resp.text()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _total(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], name: str) -> float:
    return sum(v for (n, _), v in samples.items() if n == name)


async def test_two_workers_route_on_one_view_and_count_once(epp_pool: PoolFactory, tmp_path: object) -> None:
    env = await _two_workers(epp_pool, tmp_path, CONFIG)
    port = env.runtime.ports.metrics
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        await env.set_pins([{"waiting": 9}, {"waiting": 0, "kv_cache_usage": 0.1}, {"waiting": 9}])
        before = [sim.stats()["requests"] for sim in env.servers]

        # Sixteen at once, each long enough (20 decode steps) to overlap the others: Envoy opens a
        # connection per concurrent stream (one stream each), which the kernel spreads over both.
        for round_ in range(2):
            await asyncio.gather(*(_send(http, env, f"round {round_} question {i}", 20) for i in range(16)))
        served = [sim.stats()["requests"] - b for sim, b in zip(env.servers, before, strict=True)]
        assert served == [0, 32, 0]  # both processes routed on the scraped queues

        def streams(samples: Mapping[tuple[str, tuple[tuple[str, str], ...]], float], worker: str) -> float:
            return samples.get(("epp_worker_streams_total", (("worker", worker),)), 0.0)

        samples = await _metrics(http, port)

        async def pushed() -> bool:
            nonlocal samples
            samples = await _metrics(http, port)
            return streams(samples, "0") + streams(samples, "1") == 32

        await wait_until(pushed, timeout=10, message="the child's streams on the parent's /metrics")
        assert streams(samples, "1") > 0 and streams(samples, "0") > 0, samples
        assert _total(samples, "inference_objective_request_total") == 32
        assert samples[("epp_workers", ())] == 2


async def _send(http: aiohttp.ClientSession, env: HermeticPool, prompt: str, max_tokens: int = 1) -> None:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}
    async with http.post(f"{env.envoy_url}/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        await resp.read()


async def _later_turns_off_their_first_turns_pod(env: HermeticPool, http: aiohttp.ClientSession) -> list[object]:
    """Six conversations: a first turn, then (once both processes hold it) four later turns at once, which
    Envoy spreads over the processes; the later turns that did not land on their first turn's pod."""
    port = env.runtime.ports.metrics
    rng = random.Random(3)
    wrong: list[object] = []

    async def agreed(entries: float) -> bool:
        """Both processes hold ``entries`` in their prefix index (the child's as last pushed)."""
        samples = await _metrics(http, port)
        sizes = [v for (n, _), v in samples.items() if n == "epp_worker_prefix_index_size"]
        return len(sizes) == 2 and sizes[0] == sizes[1] == entries

    entries = 0.0
    for i in range(6):
        before = [sim.stats()["requests"] for sim in env.servers]
        history = f"conversation {i} " + " ".join(f"w{rng.randrange(10_000)}" for _ in range(200))
        await _send(http, env, history)
        holder = next(p for p, sim in enumerate(env.servers) if sim.stats()["requests"] != before[p])
        await wait_until(lambda e=entries: len(_scorer_index(env)) > e, timeout=10, message="the parent learnt it")
        entries = float(len(_scorer_index(env)))
        await wait_until(lambda e=entries: agreed(e), timeout=10, message="both workers learnt the first turn")
        before = [sim.stats()["requests"] for sim in env.servers]
        await asyncio.gather(*(_send(http, env, f"{history} turn {turn}") for turn in range(4)))
        served = [sim.stats()["requests"] - b for sim, b in zip(env.servers, before, strict=True)]
        if served[holder] != 4:
            wrong.append((i, holder, served))
    return wrong


async def test_a_prefix_one_worker_learns_routes_the_others_and_a_dead_worker_is_replaced(
    epp_pool: PoolFactory, tmp_path: object
) -> None:
    env = await _two_workers(epp_pool, tmp_path, PREFIX_ONLY)
    workers = env.runtime.workers
    assert workers is not None
    port = env.runtime.ports.metrics
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        # 24 of 24 later turns on the first turn's pod, whichever process routed them
        assert await _later_turns_off_their_first_turns_pod(env, http) == []

        first = workers.pids[0]
        assert first is not None
        os.kill(first, signal.SIGKILL)  # the child dies: said, replaced, fed again
        samples = await _metrics(http, port)

        async def replaced() -> bool:
            nonlocal samples
            samples = await _metrics(http, port)
            return samples[("epp_workers", ())] == 2 and workers.pids[0] not in (None, first)

        await wait_until(replaced, timeout=30, message="a new child serving")
        assert samples[("epp_worker_restarts_total", ())] == 1
        child_streams = samples[("epp_worker_streams_total", (("worker", "1"),))]  # the dead child's stay counted
        assert child_streams > 0
        await asyncio.gather(*(_send(http, env, f"after question {i}", 20) for i in range(16)))

        async def new_child_served() -> bool:
            return (await _metrics(http, port))[("epp_worker_streams_total", (("worker", "1"),))] > child_streams

        await wait_until(new_child_served, timeout=10, message="the new child took some of Envoy's new connections")


def _scorer_index(env: object) -> Sized:
    """The parent's approximate prefix index."""
    producer = env.runtime.pools[0].routing.config.plugins["approx-prefix-cache-producer"]  # type: ignore[attr-defined]
    assert isinstance(producer, ApproxPrefixCacheProducer)
    return producer.index


async def test_with_a_valkey_every_worker_is_a_replica_on_its_stream(
    epp_pool: PoolFactory, epp_valkey: ValkeyServer, tmp_path: object
) -> None:
    env = await _two_workers(epp_pool, tmp_path, PREFIX_ONLY, "--state-sync-address", epp_valkey.url)
    sync = env.runtime.pools[0].state_sync
    assert isinstance(sync, ReplicaSync)  # not the pipes: the parent is one replica of the stream, the child another
    await wait_until(lambda: sync.link.connected, timeout=20, message="the parent reached Valkey")
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http:
        assert await _later_turns_off_their_first_turns_pod(env, http) == []
        samples = await _metrics(http, env.runtime.ports.metrics)
    assert samples[("epp_state_sync_peers", (("pool", env.pool.reported_name),))] >= 1
