"""What the real-engine tests share: vLLM's /metrics read from outside, and load sent straight to a server.

The reference values come from vLLM's own page parsed with ``prometheus_client``'s parser (not
the picker's), read the way GIE documents them: ``vllm:num_requests_waiting``,
``vllm:kv_cache_usage_perc``, and the adapters of ``vllm:lora_requests_info``'s newest series that
names any (else the newest).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

from epp_sim.realengine.servers import MODEL, VllmServer


@dataclass(frozen=True)
class EngineState:
    waiting: int
    kv_usage: float
    running_adapters: frozenset[str]


def _adapters(text: str) -> frozenset[str]:
    return frozenset(a for a in text.split(",") if a)


async def engine_state(http: aiohttp.ClientSession, server: VllmServer) -> EngineState:
    async with http.get(f"{server.url}/metrics") as resp:
        assert resp.status == 200
        page = await resp.text()
    waiting, kv, lora = 0, 0.0, []
    for family in text_string_to_metric_families(page):
        for sample in family.samples:
            if sample.name == "vllm:num_requests_waiting":
                waiting = int(sample.value)
            elif sample.name == "vllm:kv_cache_usage_perc":
                kv = sample.value
            elif sample.name == "vllm:lora_requests_info":
                lora.append(sample)
    named = [s for s in lora if s.labels.get("running_lora_adapters") or s.labels.get("waiting_lora_adapters")]
    chosen = max(named or lora, key=lambda s: s.value) if lora else None
    running = _adapters(chosen.labels.get("running_lora_adapters", "")) if chosen is not None else frozenset()
    return EngineState(waiting, kv, running)


@asynccontextmanager
async def busy(
    server: VllmServer,
    *,
    requests: int,
    max_tokens: int,
    model: str = MODEL,
    prompt: str = "Tell me a long story",
    sustained: bool = False,
) -> AsyncIterator[list[asyncio.Task[int]]]:
    """``requests`` completions running against ``server`` (straight, not through the picker) while inside.

    ``sustained`` sends each one again as soon as it finishes, so the load (and a queue beyond
    ``--max-num-seqs``) lasts as long as the block, however slowly the block's checks run.
    """

    async def one(http: aiohttp.ClientSession, i: int) -> int:
        body = {"model": model, "prompt": f"{prompt} number {i}", "max_tokens": max_tokens, "ignore_eos": True}
        while True:
            async with http.post(f"{server.url}/v1/completions", json=body) as resp:
                await resp.read()
                if not sustained:
                    return resp.status

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        tasks = [asyncio.create_task(one(http, i), name=f"load {server.name} {i}") for i in range(requests)]
        try:
            yield tasks
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def statuses(tasks: Sequence[asyncio.Task[int]]) -> list[int]:
    return [t.result() for t in tasks if t.done() and not t.cancelled() and t.exception() is None]


async def served_requests(http: aiohttp.ClientSession, server: VllmServer) -> float:
    """Requests the server finished, by its own ``vllm:request_success_total`` (every reason)."""
    return await engine_counter(http, server, "vllm:request_success_total")


async def engine_counter(http: aiohttp.ClientSession, server: VllmServer, name: str) -> float:
    """The sum of every series of sample ``name`` on the server's own ``/metrics``."""
    async with http.get(f"{server.url}/metrics") as resp:
        page = await resp.text()
    samples = (sample for family in text_string_to_metric_families(page) for sample in family.samples)
    return sum(sample.value for sample in samples if sample.name == name)
