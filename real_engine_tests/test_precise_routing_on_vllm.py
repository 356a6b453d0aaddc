"""Precise prefix routing on real vLLM's KV events, in both of llm-d's topologies, through the real Envoy.

A prompt (two or more of vLLM's 128-token blocks) is sent straight to one server, so no picker sees
it; vLLM announces the blocks it stored, and the follow-up sent through Envoy must land on that
server. Tokens come from the engine's own tokenization (``token-producer``'s vllm backend on
vLLM's render endpoint), the test's reference keys from vLLM's ``/v1/completions/render`` too.

- ``pods``: each engine binds its own address and the picker dials every pod (llm-d's pod
  discovery; ``podDiscoveryConfig.socketPort``).
- ``central``: the picker binds ``zmqEndpoint`` and every engine connects to it; the picker
  attributes each message by the ``kv@<ip>:<port>@<model>`` its topic names (and dials nobody:
  ``discoverPods: false``).
"""

from __future__ import annotations

import aiohttp
import pytest
from engine_load import served_requests

from epp.kvevents.index import block_keys, chain_seed
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer
from epp_sim.precise_prefix import announce, precise_picker_config
from epp_sim.pytest_plugin import VllmPoolFactory
from epp_sim.realengine.pool import RealEnginePool
from epp_sim.realengine.servers import MODEL, VllmFleet, VllmServer
from epp_sim.waits import wait_until

BLOCK = 16  # the picker's block (the producer's default); vLLM's CPU block (128) is a multiple
TOPICS = ("pods", "central")

STORY = (
    "In the valley of {name} the river turns twice before it reaches the sea, and every spring the "
    "{name} ferrymen repaint their boats in the colours of the old harbour. "
)


def config(fleet: VllmFleet, topology: str) -> str:
    """llm-d's precise chain, tokens from the first server's render endpoint, in ``topology``."""
    central = fleet.central_endpoint if topology == "central" else ""
    return precise_picker_config(None, fleet.events_port, central=central, render_url=fleet.servers[0].url, model=MODEL)


def producer_of(pool: RealEnginePool) -> PrecisePrefixCacheProducer:
    (served_pool,) = pool.runtime.pools
    loaded = served_pool.config
    producer = loaded.plugins["precise-prefix-cache-producer"]
    assert isinstance(producer, PrecisePrefixCacheProducer)
    return producer


async def render(http: aiohttp.ClientSession, server: VllmServer, prompt: str) -> list[int]:
    async with http.post(f"{server.url}/v1/completions/render", json={"model": MODEL, "prompt": prompt}) as resp:
        assert resp.status == 200, await resp.text()
        ids: list[int] = (await resp.json())[0]["token_ids"]
        return ids


@pytest.mark.parametrize(
    "topology", [pytest.param(t, marks=pytest.mark.real_engine(kv_events=t), id=t) for t in TOPICS]
)
async def test_a_prompt_sent_to_one_server_is_then_routed_there(
    epp_vllm_pool: VllmPoolFactory, epp_vllm: VllmFleet, topology: str
) -> None:
    assert epp_vllm.topology == topology
    pool = await epp_vllm_pool(picker_args=["--config-text", config(epp_vllm, topology)])
    producer = producer_of(pool)
    keys_of = {s.name: pool.state(s).endpoint.key for s in pool.servers}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=300)) as http:
        # Subscriptions reach a publisher a moment after they are made: announce until each is heard.
        warm = 0

        async def heard() -> bool:
            nonlocal warm
            warm += 1
            for server in pool.servers:
                if not producer.index.blocks(keys_of[server.name]):
                    await announce(
                        http, server.url, STORY.format(name=f"warm-up {warm} {server.name}") * 6, model=MODEL
                    )
            return all(producer.index.blocks(k) for k in keys_of.values())

        await wait_until(heard, timeout=120, interval=0.5, message="the picker heard both engines")
        for i in range(4):
            holder = pool.servers[i % 2]
            prompt = STORY.format(name=f"Vale{i}") * 8  # > 2 × 128 tokens
            ids = await render(http, holder, prompt)
            keys = block_keys(ids, BLOCK, chain_seed(MODEL))
            stored = (len(ids) // 128) * (128 // BLOCK)
            assert stored >= 16  # two of vLLM's blocks
            await announce(http, holder.url, prompt, model=MODEL)
            await wait_until(
                lambda: producer.index.longest_prefix(keys_of[holder.name], keys) >= stored,  # noqa: B023
                timeout=60,
                message=f"{holder.name}'s KV events for prompt {i} applied",
            )
            before = [await served_requests(http, s) for s in pool.servers]
            followup = {"model": MODEL, "prompt": prompt + " Which river?", "max_tokens": 1}
            async with http.post(f"{pool.envoy_url}/v1/completions", json=followup) as resp:
                assert resp.status == 200, await resp.text()
            after = [await served_requests(http, s) for s in pool.servers]
            expected = [1 if s is holder else 0 for s in pool.servers]
            assert [b - a for a, b in zip(before, after, strict=True)] == expected, f"prompt {i}"
    sources = producer.event_sources()
    assert sorted(s.pod for s in sources) == sorted(keys_of.values())
    if topology == "central":
        assert producer.subscribers == {} and producer.central is not None
        assert sorted(s.source for s in sources) == sorted(s.hostport for s in pool.servers)
    else:
        assert producer.central is None
