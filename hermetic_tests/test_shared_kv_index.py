"""Two `epp serve` replicas behind one Envoy, sharing the precise KV-block index on a real Valkey/Redis server.

Only replica A hears the pods' KV events (it dials them); replica B hears none (llm-d's central
mode on a socket no pod connects to: in that mode only the replica a pod connects to receives its
events). With ``valkeyConfig`` on both, what A writes to the server is what B routes on: every
prompt, whichever replica Envoy sends it to, lands on the pod that announced it. Without it, B
routes by load alone and misses, which is what makes the first case able to fail.

One pool mode (v1): what differs here is the index's backend, not how the pool is found (the
active-active case runs in every mode).
"""

from __future__ import annotations

import random
from pathlib import Path

import aiohttp
import pytest
from replica_views import health, precise_producer, routed

from epp.extproc import pb
from epp.kvevents.redis_index import RedisBlockIndex
from epp_sim.modelserver import ModelServer
from epp_sim.ports import common_free_port, free_port
from epp_sim.precise_prefix import (
    MODEL,
    SERVING_LABELS,
    announce,
    events_applied,
    kv_events_sim_config,
    precise_picker_config,
    wait_subscribed,
)
from epp_sim.pytest_plugin import EnvoyFactory, PickerFactory, PoolFactory
from epp_sim.stack.picker import InProcessPicker
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.tiny_tokenizer import sentence, write_tiny_tokenizer
from epp_sim.waits import wait_until

PODS = 3
PROMPTS = 30
SERVING, NOT_SERVING = pb.HealthCheckResponse.SERVING, pb.HealthCheckResponse.NOT_SERVING


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))


async def _health(picker: InProcessPicker) -> list[int]:
    """The picker's health port: (readiness, its shared index's detail)."""
    namespace, pool = picker.runtime.pools[0].key
    return await health(picker, "readiness", f"kv-index/{namespace}/{pool}/precise-prefix-cache-producer")


async def _gauge(http: aiohttp.ClientSession, picker: InProcessPicker) -> float:
    async with http.get(picker.metrics_url) as resp:
        text = await resp.text()
    (line,) = [x for x in text.splitlines() if x.startswith("epp_kv_index_backend_connected{")]
    return float(line.rsplit(" ", 1)[1])


async def _server_lost(replicas: tuple[InProcessPicker, ...], port: int, valkey: ValkeyServer) -> None:
    """Without the server both replicas stay ready and route (on load), and say so: health detail, gauge."""
    assert [await _health(r) for r in replicas] == [[SERVING, SERVING]] * 2
    await valkey.stop()
    indexes = [precise_producer(r).index for r in replicas]
    await wait_until(lambda: not any(getattr(i, "connected", True) for i in indexes), timeout=15)
    assert [await _health(r) for r in replicas] == [[SERVING, NOT_SERVING]] * 2
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:
        for _ in range(2):  # one through each replica
            body = {"model": MODEL, "prompt": "routed without the index", "max_tokens": 1}
            async with http.post(f"http://127.0.0.1:{port}/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
        assert [await _gauge(http, r) for r in replicas] == [0.0, 0.0]


def _failures(replicas: tuple[InProcessPicker, ...]) -> int:
    return sum(
        i.lookup_failures for i in (precise_producer(r).index for r in replicas) if isinstance(i, RedisBlockIndex)
    )


@pytest.mark.parametrize("shared", [True, False], ids=["valkey-index", "own-index"])
async def test_a_replica_that_hears_no_events_routes_on_what_the_other_wrote(
    epp_pool: PoolFactory,
    epp_picker: PickerFactory,
    epp_envoy: EnvoyFactory,
    epp_valkey: ValkeyServer,
    tokenizer_dir: Path,
    tmp_path: Path,
    shared: bool,
) -> None:
    hosts = [f"127.0.0.{2 + i}" for i in range(PODS)]
    events_port = common_free_port(hosts)
    index = epp_valkey.url if shared else ""
    hearing, deaf = tmp_path / "a.yaml", tmp_path / "b.yaml"
    hearing.write_text(precise_picker_config(tokenizer_dir, events_port, index=index))
    deaf.write_text(precise_picker_config(tokenizer_dir, 0, central=f"tcp://127.0.0.1:{free_port()}", index=index))
    sims = [kv_events_sim_config(tokenizer_dir, host, events_port, num_blocks=4096) for host in hosts]
    pool = await epp_pool(
        "v1", pods=PODS, sim_config=sims, labels=SERVING_LABELS, picker_args=["--config-file", str(hearing)]
    )
    first = pool.picker
    second = await epp_picker(*[str(deaf) if arg == str(hearing) else arg for arg in first.args])
    await second.wait_routing(pool.pool.reported_name, PODS)
    replicas = (first, second)
    if shared:
        indexes = [precise_producer(r).index for r in replicas]
        assert all(isinstance(i, RedisBlockIndex) for i in indexes)
        await wait_until(lambda: all(i.connected for i in indexes if isinstance(i, RedisBlockIndex)), timeout=10)
    envoy = await epp_envoy(first, second)

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http:

        async def send(server: ModelServer, prompt: str) -> None:
            await announce(http, server.url, prompt)

        await wait_subscribed(pool.servers, send, lambda: [precise_producer(first).subscribers.values()])
        assert precise_producer(second).subscribers == {}  # B dials no pod, and no pod connects to B
        rng = random.Random(7)
        prompts: list[tuple[str, int]] = []
        for i in range(PROMPTS):
            holder = rng.randrange(PODS)
            prompt = f"conversation {i}: " + sentence(random.Random(2000 + i), 60)
            await send(pool.servers[holder], prompt)
            prompts.append((prompt, holder))
        await wait_until(
            lambda: events_applied(precise_producer(first).subscribers.values(), pool.servers),
            timeout=10,
            message="replica A applied every announcement",
        )
        written = precise_producer(first).index
        if isinstance(written, RedisBlockIndex):
            await wait_until(lambda: written.flushed, timeout=10, message="replica A's writes on the server")

        right, wrong = [0, 0], [0, 0]  # by replica
        unanswered = 0  # lookups the server did not answer in time (a loaded CI node): routed by load, not counted
        for prompt, holder in prompts:
            followup = {"model": MODEL, "prompt": prompt + " next turn", "max_tokens": 1}
            for _ in range(2):
                before = [s.stats()["requests"] for s in pool.servers]
                routed_before = [routed(r) for r in replicas]
                failed_before = _failures(replicas)
                async with http.post(f"http://127.0.0.1:{envoy.port}/v1/completions", json=followup) as resp:
                    assert resp.status == 200, await resp.text()
                    await resp.read()
                (served_by,) = [p for p, s in enumerate(pool.servers) if s.stats()["requests"] != before[p]]
                (replica,) = [k for k, r in enumerate(replicas) if routed(r) != routed_before[k]]
                if _failures(replicas) != failed_before:
                    unanswered += 1
                    continue
                (right if served_by == holder else wrong)[replica] += 1

    assert unanswered <= PROMPTS // 5, unanswered
    assert right[1] + wrong[1] >= 10, (right, wrong)  # Envoy sent B its share
    if shared:
        assert wrong == [0, 0]  # A routes on its own events, B on what A wrote to the server
        await _server_lost(replicas, envoy.port, epp_valkey)
    else:
        assert wrong[1] > 0  # B alone has no prefix-match info: by load, it misses
        # (and A then follows B's misses: the pod B chose holds the longer prompt it just served)
