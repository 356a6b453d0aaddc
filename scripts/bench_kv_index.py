#!/usr/bin/env python3
"""Benchmark: the precise producer's ``produce()`` per request, index in memory vs on a Valkey/Redis server.

A real server (Debian's ``valkey-server`` or ``redis-server``) is started on loopback. Two
producers hold the same blocks, fed through the same BlockStored events: ``--candidates`` endpoints
(8), of which one holds the whole prompt, one its first half, one its first block, the rest
nothing. Each round times ``--requests`` calls of each producer's ``produce()`` for a
``--tokens``-token prompt (token-producer's ids, 16-token blocks), the two interleaved, and prints
per request the best and median round's wall time and this process's CPU time (the server's is
its own, on its own core), and the ratio to the in-memory index. Run it for 100k-token prompts
(6,250 blocks) and 1k-token ones; docs/kv-events.md quotes the numbers.
Usage: ``.venv/bin/python scripts/bench_kv_index.py [--tokens N] [--candidates N] [--rounds N] [--requests N]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from array import array
from pathlib import Path

import redis.asyncio as aioredis

from epp.framework.data import DataScope
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.plugin import PluginContext
from epp.framework.request import ApiKind, InferenceRequest
from epp.kvevents.decode import BlockStored
from epp.kvevents.redis_index import RedisBlockIndex
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer, create
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.waits import wait_until

MODEL = "bench-model"


def _producer(params: dict[str, object]) -> PrecisePrefixCacheProducer:
    producer = create("precise-prefix-cache-producer", params, PluginContext(pool_name="bench"))
    declared = frozenset({producer.key.id})  # what the loader grants it: publishing its match info
    producer.bind_data_scope(DataScope(producer.typed_name, readable=declared, writable=declared, kinds="DataProducer"))
    return producer


def _feed(producer: PrecisePrefixCacheProducer, pods: list[EndpointState], tokens: array[int]) -> None:
    blocks = len(tokens) // 16
    held = {0: blocks, 1: blocks // 2, 2: 1}
    for n, state in enumerate(pods):
        count = held.get(n, 0)
        if count:
            hashes = tuple(range(n * 10**7, n * 10**7 + count))
            producer.index.stored(state.endpoint.key, MODEL, BlockStored(hashes, None, tuple(tokens[: 16 * count]), 16))


async def _round(
    producer: PrecisePrefixCacheProducer, pods: list[EndpointState], tokens: array[int], n: int
) -> tuple[float, float]:
    request = InferenceRequest("r", model=MODEL, target_model=MODEL, api=ApiKind.COMPLETIONS)
    request.token_ids = tokens
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(n):
        await producer.produce(request, pods)
    return (time.perf_counter() - wall) / n, (time.process_time() - cpu) / n


async def main(args: argparse.Namespace) -> None:
    pods = [
        EndpointState(Endpoint("ns", f"pod{i}-rank-0", f"pod{i}", f"10.0.0.{i + 1}", 8000))
        for i in range(args.candidates)
    ]
    tokens = array("I", (i * 7919 % 50_000 for i in range(args.tokens)))
    with tempfile.TemporaryDirectory() as work:
        async with ValkeyServer(Path(work)) as server:
            memory = _producer({})
            shared = _producer({"indexerConfig": {"kvBlockIndexConfig": {"valkeyConfig": {"address": server.url}}}})
            index = shared.index
            assert isinstance(index, RedisBlockIndex)
            shared.endpoints_added(pods)  # starts the index's tasks (the pods are dialled in vain: no events)
            try:
                await wait_until(lambda: index.connected, timeout=10, message="server connected")
                async with aioredis.Redis.from_url(server.url) as probe:
                    before = (await probe.info("memory"))["used_memory"]
                    started = time.perf_counter()
                    for producer in (memory, shared):
                        _feed(producer, pods, tokens)
                    await wait_until(lambda: index.flushed, timeout=60, message="blocks written")
                    written = time.perf_counter() - started
                    grown = (await probe.info("memory"))["used_memory"] - before
                blocks = args.tokens // 16
                stored = blocks + blocks // 2 + 1
                print(
                    f"{args.tokens} tokens ({blocks} blocks), {args.candidates} candidates; {stored} engine blocks "
                    f"written to the server in {written:.3f} s (background), {grown / stored:.0f} bytes each there"
                )
                results: dict[str, list[tuple[float, float]]] = {"in-memory": [], "valkey": []}
                for _ in range(args.rounds):
                    for name, producer in (("in-memory", memory), ("valkey", shared)):
                        results[name].append(await _round(producer, pods, tokens, args.requests))
                failures = index.lookup_failures
                for name, rounds in results.items():
                    walls, cpus = [w for w, _ in rounds], [c for _, c in rounds]
                    wall, cpu = statistics.median(walls) * 1e6, statistics.median(cpus) * 1e6
                    print(
                        f"{name:10s} wall best {min(walls) * 1e6:8.1f} us  median {wall:8.1f} us"
                        f"   picker CPU best {min(cpus) * 1e6:8.1f} us  median {cpu:8.1f} us"
                    )
                mem_wall = statistics.median(w for w, _ in results["in-memory"])
                mem_cpu = statistics.median(c for _, c in results["in-memory"])
                red_wall = statistics.median(w for w, _ in results["valkey"])
                red_cpu = statistics.median(c for _, c in results["valkey"])
                print(
                    f"valkey / in-memory: wall {red_wall / mem_wall:.2f}x, picker CPU {red_cpu / mem_cpu:.2f}x; "
                    f"lookups without an answer in time: {failures} of {args.rounds * args.requests}"
                )
            finally:
                await shared.aclose()
                await memory.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=100_000)
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--requests", type=int, default=50)
    asyncio.run(main(parser.parse_args()))
