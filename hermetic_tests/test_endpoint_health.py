"""Dead, frozen and failing model servers under steady load through the real Envoy (issue 13).

The favourite pod (best pinned metrics, so it gets every request) runs its simulator as its own
process: SIGKILL and SIGSTOP act on a real process, and Envoy meets a refused connection or a
silent one. Load is 100 requests/s; "routed at" is when the picker's scheduler last chose the
pod (``inference_extension_scheduler_attempts_total``, sampled every few milliseconds).
The targets (issue 13): after a kill, nothing routed there later than 2 scrape intervals
(100 ms at 50 ms) and client-visible failures at most 1 % of 5 s at 100 req/s (5); after a
freeze, nothing routed there later than the staleness threshold (2 s). Assertions keep margins
for a loaded machine; each test prints what it measured.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import aiohttp
import pytest
from pool_modes import ALL_MODES, served

from epp.framework.health import Health
from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

SCRAPE = "--refresh-metrics-interval=50ms"  # the picker's default, which the targets assume
BUSY = {"waiting": 3, "kv_cache_usage": 0.5}
IDLE = {"waiting": 0, "kv_cache_usage": 0.0}
RATE = 100.0  # requests per second
MODEL = "m"
SIM = SimConfig(model=MODEL)  # what every simulated pod serves
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 1}


@dataclass
class Load:
    """Requests sent at a steady rate through Envoy: when each went out and what came back."""

    sent: list[tuple[float, int]] = field(default_factory=list)  # (sent at, status; 0 = no answer in time)

    def failures_after(self, t: float) -> int:
        return sum(1 for at, status in self.sent if at >= t and status != 200)

    def statuses(self, status: int) -> int:
        return sum(1 for _, s in self.sent if s == status)

    def count_after(self, t: float) -> int:
        return sum(1 for at, _ in self.sent if at >= t)


@asynccontextmanager
async def steady_load(url: str, *, answer_within: float = 3.0) -> AsyncIterator[Load]:
    load = Load()
    pending: set[asyncio.Task[None]] = set()

    async def one(http: aiohttp.ClientSession, at: float) -> None:
        status = 0
        try:
            async with asyncio.timeout(answer_within), http.post(f"{url}/v1/completions", json=BODY) as resp:
                await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError):
            pass
        load.sent.append((at, status))

    async def drive(http: aiohttp.ClientSession) -> None:
        start = time.monotonic()
        n = 0
        while True:
            n += 1
            await asyncio.sleep(max(0.0, start + n / RATE - time.monotonic()))  # pacing, not waiting for a condition
            task = asyncio.create_task(one(http, time.monotonic()))
            pending.add(task)
            task.add_done_callback(pending.discard)

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as http:
        driver = asyncio.create_task(drive(http))
        try:
            yield load
        finally:
            driver.cancel()
            await asyncio.gather(driver, *pending, return_exceptions=True)


@dataclass
class RoutedWatch:
    """When the picker last chose a pod, from its scheduler counter sampled every few milliseconds."""

    count: Callable[[], float]
    last_change: float = 0.0

    async def run(self) -> None:
        seen = self.count()
        while True:
            now = self.count()
            if now != seen:
                seen, self.last_change = now, time.monotonic()
            await asyncio.sleep(0.002)  # sampling period of the watch, not a wait for a condition


@asynccontextmanager
async def watch_routed(env: HermeticPool, pod: str) -> AsyncIterator[RoutedWatch]:
    labels = {"status": "success", "target_model_name": MODEL, "pod_name": pod, "namespace": "default"}
    labels["port"] = str(env.port)
    watch = RoutedWatch(lambda: env.sample("inference_extension_scheduler_attempts_total", **labels))
    task = asyncio.create_task(watch.run())
    try:
        yield watch
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def favourite_pool(epp_pool: PoolFactory, mode: PoolMode) -> HermeticPool:
    """Three busy in-process pods and one idle pod running as its own process (the favourite)."""
    env = await epp_pool(
        mode, pods=3, process_pods=1, envoy=True, picker_args=[SCRAPE], sim_config=SIM, objects=served(mode, MODEL)
    )
    for server in env.servers:
        server.pin(**BUSY)
    await env.processes[0].pin(**IDLE)
    favourite = env.processes[0].address
    await wait_until(
        lambda: all(s.metrics.waiting_queue == (0 if s.endpoint.hostport == favourite else 3) for s in env.endpoints()),
        timeout=10,
        message="picker scraped the pins",
    )
    return env


def health_of(env: HermeticPool, address: str) -> Health:
    return next(s.health.state for s in env.endpoints() if s.endpoint.hostport == address)


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_killed_favourite_gets_no_more_requests_within_two_scrapes(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await favourite_pool(epp_pool, mode)
    pod = env.processes[0]
    async with watch_routed(env, pod.name) as routed, steady_load(env.envoy_url) as load:
        await wait_until(lambda: routed.last_change > 0 and load.count_after(0) >= 50, timeout=10)
        killed_at, before = time.monotonic(), routed.count()
        pod.kill()
        await wait_until(lambda: load.count_after(killed_at) >= 200, timeout=15)
    late = routed.last_change - killed_at
    after = routed.count() - before
    # Every request the dead pod costs is Envoy's 503 (refused, or reset in flight); one sent just
    # before the kill may reach Envoy after it, so the whole run counts.
    failures = load.statuses(503)
    total = load.count_after(killed_at)
    print(f"kill ({mode}): {after:.0f} routed there after, the last {late * 1000:.0f} ms after;", end=" ")
    print(f"{failures} of {total} failed")
    assert health_of(env, pod.address) in (Health.UNREACHABLE, Health.EJECTED)
    assert late <= 0.3  # target 0.1 s (two 50 ms scrapes); margin for a loaded machine
    # Target 5 (1 % of 5 s at 100 req/s). Requests Envoy already holds for the pod when it dies
    # fail whatever the picker does, and on a loaded machine Envoy holds more of them: margin.
    assert failures <= 20
    assert load.failures_after(killed_at + 0.5) == 0


async def test_frozen_favourite_gets_no_more_requests_within_the_staleness_threshold(epp_pool: PoolFactory) -> None:
    env = await favourite_pool(epp_pool, "v1")
    pod = env.processes[0]
    async with watch_routed(env, pod.name) as routed, steady_load(env.envoy_url, answer_within=1.0) as load:
        await wait_until(lambda: routed.last_change > 0 and load.count_after(0) >= 50, timeout=10)
        frozen_at = time.monotonic()
        pod.freeze()
        await wait_until(lambda: health_of(env, pod.address) is Health.SUSPECT, timeout=5)
        await wait_until(lambda: load.count_after(frozen_at) >= 250, timeout=15)
        late = routed.last_change - frozen_at
        print(f"freeze: last routed {late * 1000:.0f} ms after; {load.failures_after(frozen_at)} requests hung")
        assert late <= 2.0  # the staleness threshold (the scrape times out after 1 s: suspect)
        pod.thaw()
        await wait_until(lambda: health_of(env, pod.address) is Health.HEALTHY, timeout=10)
        thawed_at = time.monotonic()
        await wait_until(lambda: routed.last_change > thawed_at, timeout=10)  # the favourite again


async def test_a_pod_answering_500s_is_ejected_and_back_after_it_recovers(
    epp_pool: PoolFactory, caplog: pytest.LogCaptureFixture
) -> None:
    env = await epp_pool("v1", pods=3, envoy=True, picker_args=[SCRAPE], sim_config=SIM)
    await env.set_pins([IDLE, BUSY, BUSY])
    failing = env.hostport(0)
    with caplog.at_level(logging.INFO, logger="epp.datastore.health_recorder"):
        async with steady_load(env.envoy_url) as load:
            await wait_until(lambda: load.count_after(0) >= 20, timeout=10)
            broke_at = time.monotonic()
            env.servers[0].fail(500)
            await wait_until(lambda: health_of(env, failing) is Health.EJECTED, timeout=5)
            failures = load.failures_after(broke_at)
            env.servers[0].recover()
            await wait_until(lambda: health_of(env, failing) is Health.HEALTHY, timeout=10)
            served = env.servers[0].stats()["requests"]
            await wait_until(lambda: env.servers[0].stats()["requests"] > served, timeout=10)
    print(f"500s: {failures} client-visible failures until ejected")
    assert failures <= 6
    labels = {"namespace": "default", "endpoint_name": "pod-0-rank-0"}
    assert env.sample("epp_endpoint_health", **labels, state="healthy") == 1
    assert env.sample("epp_endpoint_health", **labels, state="ejected") == 0
    assert env.sample("epp_endpoint_health_transitions_total", **labels, from_state="healthy", to_state="ejected") >= 1
    changes = [r for r in caplog.records if r.getMessage() == "Endpoint health changed"]
    assert any("failed responses in a row, last: HTTP 500" in getattr(r, "reason", "") for r in changes)


async def test_a_flapping_pod_is_not_let_back_faster_than_its_back_off(
    epp_pool: PoolFactory, caplog: pytest.LogCaptureFixture
) -> None:
    env = await epp_pool("v1", pods=3, envoy=True, picker_args=[SCRAPE], sim_config=SIM)
    await env.set_pins([IDLE, BUSY, BUSY])
    server = env.servers[0]
    with caplog.at_level(logging.INFO, logger="epp.datastore.health_recorder"):
        async with steady_load(env.envoy_url):
            started = time.monotonic()
            while time.monotonic() - started < 4.0:  # 500s for 100 ms, then fine for 100 ms, and again
                server.fail(500)
                await asyncio.sleep(0.1)  # the flapping period itself
                server.recover()
                await asyncio.sleep(0.1)
    changes = [(r.created, r.__dict__["to"]) for r in caplog.records if r.getMessage() == "Endpoint health changed"]
    ejected = [t for t, to in changes if to == "ejected"]
    back = [t for t, to in changes if to == "healthy"]
    held = [round(b - e, 2) for e, b in zip(ejected, back, strict=False)]
    print(f"flapping: {len(ejected)} ejections in 4 s, back after {held} s")
    assert 1 <= len(ejected) <= 3  # 20 flaps; held out 1 s, then 2 s: at most 3 ejections in 4 s
    for n, (out, again) in enumerate(zip(ejected, back, strict=False)):
        assert again - out >= 1.0 * 2**n - 0.05  # the back-off doubles with each fall in a row


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_when_every_pod_is_unreachable_requests_are_still_routed_and_counted(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    env = await epp_pool(mode, pods=2, sim_config=SIM, objects=served(mode, MODEL))
    for server in env.servers:
        await server.stop()
    await wait_until(lambda: all(s.health.state is Health.UNREACHABLE for s in env.endpoints()), timeout=5)
    routed = await env.route(BODY)
    assert routed.status == 200 and routed.endpoint in {env.hostport(0), env.hostport(1)}
    registry = env.runtime.metrics.registry
    assert registry.get_sample_value("epp_endpoint_health_fail_open_total", {"name": env.pool.reported_name}) == 1
