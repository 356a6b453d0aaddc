"""The picker's scraped queue, KV use and LoRA adapters equal what vLLM's /metrics says, under load, over time.

Load goes straight to the servers (more requests than ``--max-num-seqs``, each sent again as
it finishes, so a real queue lasts however slowly the samples come; adapter requests on the
second server). Each sample reads vLLM's page, waits for the
picker's next scrape of that server, and reads the page again: when both reads agree (the
engine's state held still across the scrape), the picker's snapshot must equal them exactly.
"""

from __future__ import annotations

import time

import aiohttp
from engine_load import EngineState, busy, engine_state

from epp_sim.pytest_plugin import VllmPoolFactory
from epp_sim.realengine.servers import MAX_NUM_SEQS, VllmServer
from epp_sim.waits import wait_until

SAMPLES = 6  # per server, with a queue


async def test_scraped_queue_kv_and_adapters_equal_vllm_metrics_under_load(
    epp_vllm_pool: VllmPoolFactory, adapter_on_second: str
) -> None:
    pool = await epp_vllm_pool(envoy=False)
    first, second = pool.servers
    compared: dict[str, list[EngineState]] = {first.name: [], second.name: []}
    async with (
        busy(first, requests=MAX_NUM_SEQS + 3, max_tokens=48, sustained=True),
        busy(second, requests=MAX_NUM_SEQS + 2, max_tokens=32, model=adapter_on_second, sustained=True),
        aiohttp.ClientSession() as http,
    ):

        async def compare(server: VllmServer) -> None:
            before = await engine_state(http, server)
            since = time.monotonic()
            await wait_until(lambda: pool.state(server).metrics.updated_at > since, timeout=5)
            seen = pool.state(server).metrics
            after = await engine_state(http, server)
            if before == after:
                picker = EngineState(seen.waiting_queue, seen.kv_cache_usage, seen.active_adapters)
                assert picker == before, f"{server.name}: picker {picker} != vLLM {before}"
                compared[server.name].append(before)

        async def sampled_enough() -> bool:
            for server in pool.servers:
                await compare(server)
            return all(sum(1 for s in states if s.waiting > 0) >= SAMPLES for states in compared.values())

        try:
            await wait_until(sampled_enough, timeout=300, interval=0.1)
        except TimeoutError as timeout:
            queues = {name: [s.waiting for s in states] for name, states in compared.items()}
            raise AssertionError(f"not {SAMPLES} plateaus with a queue on both servers; queues: {queues}") from timeout
    first_states, second_states = compared[first.name], compared[second.name]
    print(f"compared {len(first_states)} + {len(second_states)} samples; last {first_states[-1]}, {second_states[-1]}")
    assert any(s.kv_usage > 0 for s in first_states + second_states)
    assert any(s.running_adapters == {adapter_on_second} for s in second_states)
    assert all(not s.running_adapters for s in first_states)
