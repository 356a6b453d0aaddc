"""Two `epp serve` replicas behind one Envoy, no leader election, route every prompt to the pod that holds it.

Active-active works because the pods' KV events are the same for every subscriber: each replica
builds the same precise index on its own. Each prompt is announced on one pod directly (no picker
sees it), then sent twice through Envoy, whose ext_proc cluster balances the replicas round robin,
so most prompts are routed once by each replica. Which replica routed a request is read from its
own request counter; which pod served it, from the simulators' request counts.
"""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp
import pytest
from pool_modes import ALL_MODES
from precise_pools import precise_pool
from replica_views import precise_producer, routed

from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import ModelServer
from epp_sim.precise_prefix import (
    MODEL,
    announce,
    events_applied,
    wait_subscribed,
)
from epp_sim.pytest_plugin import EnvoyFactory, PickerFactory, PoolFactory
from epp_sim.tiny_tokenizer import sentence
from epp_sim.waits import wait_until

PODS = 3
PROMPTS = 100


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_two_replicas_send_every_prompt_to_the_pod_holding_it(
    epp_pool: PoolFactory,
    epp_picker: PickerFactory,
    epp_envoy: EnvoyFactory,
    tokenizer_dir: Path,
    tmp_path: Path,
    mode: PoolMode,
) -> None:
    pool = await precise_pool(epp_pool, mode, tokenizer_dir, tmp_path, pods=PODS, num_blocks=4096)
    first = pool.picker
    second = await epp_picker(*first.args)  # the same flags and config: a second replica
    await second.wait_routing(pool.pool.reported_name, PODS)
    replicas = (first, second)
    assert not any(r.options.leader_election for r in replicas)  # the default: every replica serves
    envoy = await epp_envoy(first, second)  # one ext_proc cluster, both replicas healthy

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

        async def send(server: ModelServer, prompt: str) -> None:
            await announce(http, server.url, prompt)

        await wait_subscribed(pool.servers, send, lambda: [precise_producer(r).subscribers.values() for r in replicas])
        rng = random.Random(42)
        prompts: list[tuple[str, int]] = []
        for i in range(PROMPTS):
            holder = rng.randrange(PODS)
            prompt = f"conversation {i}: " + sentence(random.Random(1000 + i), 60)
            await send(pool.servers[holder], prompt)
            prompts.append((prompt, holder))
        await wait_until(
            lambda: all(events_applied(precise_producer(r).subscribers.values(), pool.servers) for r in replicas),
            timeout=10,
            message="both replicas applied every announcement",
        )

        wrong: list[tuple[int, int, int]] = []  # (prompt, holder, pod that served it)
        routed_by = [0, 0]
        by_both = 0
        for i, (prompt, holder) in enumerate(prompts):
            followup = {"model": MODEL, "prompt": prompt + " next turn", "max_tokens": 1}
            replicas_of_prompt = set()
            for _ in range(2):
                before = [s.stats()["requests"] for s in pool.servers]
                routed_before = [routed(r) for r in replicas]
                async with http.post(f"http://127.0.0.1:{envoy.port}/v1/completions", json=followup) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
                (served_by,) = [p for p, s in enumerate(pool.servers) if s.stats()["requests"] != before[p]]
                (replica,) = [k for k, r in enumerate(replicas) if routed(r) != routed_before[k]]
                routed_by[replica] += 1
                replicas_of_prompt.add(replica)
                if served_by != holder:
                    wrong.append((i, holder, served_by))
            by_both += len(replicas_of_prompt) == 2

    assert wrong == []  # 200 of 200 requests on the pod that announced the prompt
    assert min(routed_by) >= 50, routed_by  # Envoy spread them over both replicas...
    assert by_both >= 50, by_both  # ...and both routed the same prompt to the same pod
