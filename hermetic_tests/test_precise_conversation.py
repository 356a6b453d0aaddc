"""A long conversation through Envoy to the precise picker: each turn goes to the pod holding the last, and
the picker tokenizes only what each turn adds (its prefix token cache, read from its own ``/metrics``).

The first turn is announced on one pod directly (no picker sees it); every later turn repeats the
one before and adds to its end, and is sent through the real Envoy. The pod's KV events name
blocks of the engine's token ids; the picker's ids come from its local tokenizer, which cuts the
prompt into chunks and reuses those of earlier turns. If a joined id differed from the whole
prompt's, every block from there on would miss and the match would fall short of the prompt.
"""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp
import pytest
from pool_modes import ALL_MODES
from precise_pools import precise_pool

from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer
from epp.plugins.token_producer import TokenProducer
from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import ModelServer
from epp_sim.precise_prefix import (
    MODEL,
    announce,
    events_applied,
    wait_subscribed,
)
from epp_sim.pytest_plugin import EnvoyFactory, PoolFactory
from epp_sim.stack.picker import InProcessPicker
from epp_sim.tiny_tokenizer import sentence
from epp_sim.waits import wait_until

PODS = 3
TURNS = 5


def _plugin(picker: InProcessPicker, name: str) -> object:
    (pool,) = picker.runtime.pools
    return pool.config.plugins[name]


async def _metric(http: aiohttp.ClientSession, picker: InProcessPicker, name: str) -> float:
    async with http.get(picker.metrics_url) as resp:
        text = await resp.text()
    values = [float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name + "{")]
    assert len(values) == 1, (name, values)
    return values[0]


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_every_turn_goes_to_the_pod_holding_the_last_and_only_new_text_is_tokenized(
    epp_pool: PoolFactory, epp_envoy: EnvoyFactory, tokenizer_dir: Path, tmp_path: Path, mode: PoolMode
) -> None:
    pool = await precise_pool(epp_pool, mode, tokenizer_dir, tmp_path, pods=PODS, num_blocks=8192)
    picker = pool.picker
    assert isinstance(picker, InProcessPicker)
    producer = _plugin(picker, "precise-prefix-cache-producer")
    tokens = _plugin(picker, "token-producer")
    assert isinstance(producer, PrecisePrefixCacheProducer) and isinstance(tokens, TokenProducer)
    envoy = await epp_envoy(picker)
    holder = 1
    rng = random.Random(23)
    turn = "agent transcript: " + sentence(rng, 5000)  # ~30 KiB: several of the cache's chunks

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:

        async def send(server: ModelServer, prompt: str) -> None:
            await announce(http, server.url, prompt)

        await wait_subscribed(pool.servers, send, lambda: [producer.subscribers.values()])
        await send(pool.servers[holder], turn)
        for n in range(TURNS):
            await wait_until(
                lambda: events_applied(producer.subscribers.values(), pool.servers),
                timeout=10,
                message="the picker applied every announcement",
            )
            turn += f" turn {n}: " + sentence(rng, 150)
            before = [s.stats()["requests"] for s in pool.servers]
            body = {"model": MODEL, "prompt": turn, "max_tokens": 1}
            async with http.post(f"http://127.0.0.1:{envoy.port}/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
            served_by = [p for p, s in enumerate(pool.servers) if s.stats()["requests"] != before[p]]
            assert served_by == [holder], (n, served_by)

        # The ids the picker routed the last turn with (served again from its cache, whole) are the engine's.
        async with http.post(
            f"{pool.servers[holder].url}/v1/completions/render", json={"model": MODEL, "prompt": turn}
        ) as resp:
            engine_ids = (await resp.json())[0]["token_ids"]
        hits = await _metric(http, picker, "epp_token_cache_hits_total")
        local = tokens._local  # noqa: SLF001 (the picker's own tokenizer, asked once more for the last turn)
        assert local is not None
        assert list(await local.prompt_ids(turn)) == engine_ids
        assert await _metric(http, picker, "epp_token_cache_hits_total") == hits + 1
        assert await _metric(http, picker, "epp_token_cache_prefix_reuse") == 1
        assert await _metric(http, picker, "epp_token_cache_seam_failures_total") == 0
        assert await _metric(http, picker, "epp_token_cache_misses_total") == TURNS  # the last asked once more: a hit
        # Every turn after the first reused at least the previous turn's text but its last chunk.
        reused = await _metric(http, picker, "epp_token_cache_prefix_tokens_total")
        assert reused >= (TURNS - 1) * 4000, reused
        assert 0 < await _metric(http, picker, "epp_token_cache_tokens") <= 16 * 1024 * 1024
