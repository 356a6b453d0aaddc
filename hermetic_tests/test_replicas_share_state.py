"""Three `epp serve` replicas behind one Envoy share what each learns alone through a real Valkey/Redis server.

Envoy balances the replicas round robin, so a conversation's turns are routed by different
replicas. With the approximate prefix index alone each replica would know only the turns it
routed itself; with ``--state-sync-address`` every replica's insertions reach the others, so every
later turn goes to the pod that served the first. In-flight counts cross too (a long request
routed by one replica shows on every replica's endpoint), a replica that loses the server says so
(``epp_state_sync_connected`` 0, its health service ``state-sync/<namespace>/<pool>``
NOT_SERVING while readiness stays SERVING) and keeps routing, and the sync resumes when the server is back.
"""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import aiohttp
import pytest
from picker_configs import PREFIX_ONLY
from pool_modes import ALL_MODES, served
from replica_views import health, routed

from epp.extproc import pb
from epp.plugins.approx_prefix_producer import ApproxPrefixCacheProducer
from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import EnvoyFactory, PickerFactory, PoolFactory
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.picker import InProcessPicker
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.waits import wait_until

SERVING = pb.HealthCheckResponse.SERVING
NOT_SERVING = pb.HealthCheckResponse.NOT_SERVING
PODS = 3
REPLICAS = 3
MODEL = "m"


def _scorer(picker: InProcessPicker) -> ApproxPrefixCacheProducer:
    """The replica's approximate index (the producer the loader adds for ``prefix-cache-scorer``)."""
    producer = picker.runtime.pools[0].routing.config.plugins["approx-prefix-cache-producer"]
    assert isinstance(producer, ApproxPrefixCacheProducer)
    return producer


async def _replicas(
    epp_pool: PoolFactory,
    epp_picker: PickerFactory,
    epp_envoy: EnvoyFactory,
    valkey: ValkeyServer,
    mode: PoolMode,
    tmp_path: object,
    sim: SimConfig,
) -> tuple[list[InProcessPicker], EnvoyProcess, list[object]]:
    config = f"{tmp_path}/approximate.yaml"
    await asyncio.to_thread(lambda: open(config, "w").write(PREFIX_ONLY))  # noqa: SIM115,PTH123 (a test's file)
    pool = await epp_pool(
        mode,
        pods=PODS,
        sim_config=sim,
        objects=served(mode, MODEL),
        picker_args=[
            "--config-file",
            config,
            "--state-sync-address",
            valkey.url,
            "--state-sync-interval",
            "20ms",
        ],
    )
    first = pool.picker
    replicas = [first, *[await epp_picker(*first.args) for _ in range(REPLICAS - 1)]]
    for replica in replicas:
        await replica.wait_routing(pool.pool.reported_name, PODS)
    links = [r.runtime.pools[0].state_sync for r in replicas]
    await wait_until(lambda: all(s is not None and s.link.connected for s in links), timeout=20, message="synced")
    envoy = await epp_envoy(*replicas)
    return replicas, envoy, list(pool.servers)


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_every_turn_of_a_conversation_goes_where_the_first_went_whichever_replica_routes_it(
    epp_pool: PoolFactory,
    epp_picker: PickerFactory,
    epp_envoy: EnvoyFactory,
    epp_valkey: ValkeyServer,
    tmp_path: object,
    mode: PoolMode,
) -> None:
    replicas, envoy, servers = await _replicas(
        epp_pool, epp_picker, epp_envoy, epp_valkey, mode, tmp_path, SimConfig(model=MODEL)
    )
    rng = random.Random(7)
    wrong: list[tuple[int, int, int]] = []
    routed_by = [0] * REPLICAS
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:

        async def send(prompt: str) -> int:
            before = [s.stats()["requests"] for s in servers]  # type: ignore[attr-defined]
            routed_before = [routed(r) for r in replicas]
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 1}
            async with http.post(f"http://127.0.0.1:{envoy.port}/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
            (replica,) = [k for k, r in enumerate(replicas) if routed(r) != routed_before[k]]
            routed_by[replica] += 1
            (served_by,) = [p for p, s in enumerate(servers) if s.stats()["requests"] != before[p]]  # type: ignore[attr-defined]
            return served_by

        for i in range(12):
            history = f"conversation {i} " + " ".join(f"w{rng.randrange(10_000)}" for _ in range(200))
            holder = await send(history)
            # the replica that routed it learnt it before answering: equal sizes mean the others did too
            await wait_until(
                lambda: len({len(_scorer(r).index) for r in replicas}) == 1,
                timeout=10,
                message="every replica learnt the first turn",
            )
            for turn in range(REPLICAS):
                served_by = await send(f"{history} turn {turn}")
                if served_by != holder:
                    wrong.append((i, holder, served_by))
    assert wrong == []  # 36 of 36 later turns on the first turn's pod
    assert min(routed_by) >= 10, routed_by  # Envoy spread the 48 requests over the three replicas


async def _health(picker: InProcessPicker) -> list[int]:
    """The picker's health port: (readiness, its pool's state-sync detail)."""
    detail = picker.runtime.pools[0].state_sync.health_name  # type: ignore[union-attr]
    return await health(picker, "readiness", detail)


async def _connected(http: aiohttp.ClientSession, picker: InProcessPicker) -> float:
    """``epp_state_sync_connected`` as the picker's /metrics shows it."""
    async with http.get(picker.metrics_url) as resp:
        text = await resp.text()
    (line,) = [x for x in text.splitlines() if x.startswith("epp_state_sync_connected{")]
    return float(line.rsplit(" ", 1)[1])


async def test_in_flight_counts_cross_and_a_replica_that_loses_valkey_routes_on_and_catches_up(
    epp_pool: PoolFactory,
    epp_picker: PickerFactory,
    epp_envoy: EnvoyFactory,
    epp_valkey: ValkeyServer,
    tmp_path: object,
) -> None:
    slow = SimConfig(model=MODEL, decode_time_base=0.1)  # 300 tokens: 30 s, cut short below
    replicas, envoy, _ = await _replicas(epp_pool, epp_picker, epp_envoy, epp_valkey, "v1", tmp_path, slow)

    def in_flight(picker: InProcessPicker) -> list[int]:
        return sorted(s.in_flight_requests for s in picker.runtime.pools[0].datastore.endpoints())

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        body = {"model": MODEL, "prompt": "a long answer", "max_tokens": 300, "stream": True}
        async with http.post(f"http://127.0.0.1:{envoy.port}/v1/completions", json=body) as resp:
            assert resp.status == 200
            await resp.content.readline()  # the stream has started: one replica counts it in
            await wait_until(
                lambda: all(in_flight(r) == [0, 0, 1] for r in replicas),
                timeout=15,
                message="every replica counts the one request in flight",
            )
        # the client went away: the routing replica counts it out, and so do the others
        await wait_until(lambda: all(in_flight(r) == [0, 0, 0] for r in replicas), timeout=15, message="counted out")

        assert [await _connected(http, r) for r in replicas] == [1.0] * REPLICAS
        assert [await _health(r) for r in replicas] == [[SERVING, SERVING]] * REPLICAS
        assert [await _health(r) for r in replicas] == [[SERVING, SERVING]] * REPLICAS
        (shared,) = {len(_scorer(r).index) for r in replicas}  # what all of them know before the outage
        await epp_valkey.stop()
        await wait_until(
            lambda: not any(r.runtime.pools[0].state_sync.link.connected for r in replicas),  # type: ignore[union-attr]
            timeout=15,
            message="every replica noticed",
        )
        assert [await _connected(http, r) for r in replicas] == [0.0] * REPLICAS
        assert [await _health(r) for r in replicas] == [[SERVING, NOT_SERVING]] * REPLICAS  # still ready
        for k in range(REPLICAS):  # each replica routes (and learns) on its own view meanwhile
            alone = {"model": MODEL, "prompt": f"outage {k} " + "word " * 60 * (k + 1), "max_tokens": 1}
            async with http.post(f"http://127.0.0.1:{envoy.port}/v1/completions", json=alone) as resp:
                assert resp.status == 200, await resp.text()
                await resp.read()
        alone = [len(_scorer(r).index) - shared for r in replicas]  # the prompts share no block: no overlap
        assert max(alone) < sum(alone)  # each knows only what it routed itself

        await epp_valkey.start()  # the same address, empty
        await wait_until(
            lambda: all(r.runtime.pools[0].state_sync.link.connected for r in replicas),  # type: ignore[union-attr]
            timeout=30,
            message="every replica is back",
        )
        await wait_until(
            lambda: [len(_scorer(r).index) for r in replicas] == [shared + sum(alone)] * REPLICAS,
            timeout=15,
            message="what each learnt alone reached the others",
        )
        assert [await _connected(http, r) for r in replicas] == [1.0] * REPLICAS
        assert [await _health(r) for r in replicas] == [[SERVING, SERVING]] * REPLICAS


async def test_a_replica_started_while_valkey_is_down_serves_says_so_and_joins_when_it_comes_up(
    epp_pool: PoolFactory, epp_envoy: EnvoyFactory, tmp_path: Path
) -> None:
    valkey = ValkeyServer(tmp_path / "late-valkey")  # its port is chosen, nothing listens on it yet
    pool = await epp_pool(
        "v1",
        pods=2,
        sim_config=SimConfig(model=MODEL),
        picker_args=["--state-sync-address", valkey.url, "--state-sync-interval", "20ms"],
    )
    picker = pool.picker
    link = picker.runtime.pools[0].state_sync.link  # type: ignore[union-attr]
    await wait_until(lambda: link.disconnects == 1, timeout=15, message="the missing server is noticed")
    envoy = await epp_envoy(picker)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=20)) as http:
        body = {"model": MODEL, "prompt": "served without valkey", "max_tokens": 1}
        async with http.post(f"http://127.0.0.1:{envoy.port}/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
        assert await _connected(http, picker) == 0.0
        assert await _health(picker) == [SERVING, NOT_SERVING]
        async with valkey:
            await wait_until(lambda: link.connected, timeout=30, message="joined once the server is up")
            assert await _connected(http, picker) == 1.0
            assert await _health(picker) == [SERVING, SERVING]
