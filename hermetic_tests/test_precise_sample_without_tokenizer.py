"""llm-d's precise sample configuration against simulators started without ``--tokenizer``.

The sample's chain (``token-producer`` with the vllm backend → ``precise-prefix-cache-producer``
→ ``prefix-cache-scorer``, beside the load scorers and the data-layer wiring) is used as
upstream ships it but for the names that are the deployment's own: the model, the render URL (a
simulator beside the picker, as llm-d's ``vllm launch render`` sidecar) and the events port;
the sample's ``decode-filter`` (P/D disaggregation's, which this picker does not load) is left out.
The simulated pods tokenize by default (4 characters a token) and publish those ids; their
render endpoints return the same ids, so every prompt announced on a pod is then routed to it
(before, render answered 400 and half the prompts went elsewhere).
"""

from __future__ import annotations

import dataclasses
import random

import aiohttp
import pytest
from pool_modes import ALL_MODES, served

from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer
from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import ModelServer
from epp_sim.ports import common_free_port
from epp_sim.precise_prefix import (
    MODEL,
    SERVING_LABELS,
    announce,
    events_applied,
    kv_events_sim_config,
    llm_d_precise_sample,
    wait_subscribed,
)
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.tiny_tokenizer import sentence
from epp_sim.waits import wait_until

PODS = 3
PROMPTS = 10
BLOCK = 64  # the sample's tokenProcessorConfig.blockSize, and llm-d's guide's --block-size


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_llm_d_precise_sample_routes_every_prompt_to_its_pod(epp_pool: PoolFactory, mode: PoolMode) -> None:
    hosts = [f"127.0.0.{2 + i}" for i in range(PODS)]  # the addresses epp_pool gives a test's first pods
    events_port = common_free_port(hosts)
    pod_config = dataclasses.replace(
        kv_events_sim_config(None, hosts[0], events_port, num_blocks=1024), block_size=BLOCK, max_model_len=8192
    )
    assert pod_config.tokenizer is None
    sims = [
        dataclasses.replace(pod_config, kv_events=kv_events_sim_config(None, h, events_port).kv_events) for h in hosts
    ]
    async with ModelServer(pod_config, host="127.0.0.250") as render:  # the render sidecar: a pod without events
        config = "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n" + llm_d_precise_sample(
            model=MODEL, render_url=render.url, events_port=events_port, enable_metrics=False
        )
        pool = await epp_pool(
            mode,
            pods=PODS,
            sim_config=sims,
            labels=SERVING_LABELS,
            objects=served(mode, MODEL),
            picker_args=["--config-text", config],
        )
        assert [s.host for s in pool.servers] == hosts
        (served_pool,) = pool.runtime.pools
        loaded = served_pool.config
        producer = loaded.plugins["precise-prefix-cache-producer"]
        assert isinstance(producer, PrecisePrefixCacheProducer)
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

            async def send(server: ModelServer, prompt: str) -> None:
                await announce(http, server.url, prompt)

            await wait_subscribed(pool.servers, send, lambda: [producer.event_sources()])
            rng = random.Random(7)
            routed: list[tuple[str, str]] = []
            for i in range(PROMPTS):
                holder = pool.servers[rng.randrange(PODS)]
                prompt = f"tenant {i}: " + sentence(random.Random(500 + i), 120)  # several 64-token blocks
                await send(holder, prompt)
                await wait_until(lambda: events_applied(producer.event_sources(), pool.servers), timeout=10)
                answer = await pool.route({"model": MODEL, "prompt": prompt + " and then?"})
                assert answer.status == 200
                routed.append((answer.endpoint, holder.address))
    assert [served_by for served_by, _ in routed] == [holder for _, holder in routed]  # 10 of 10
