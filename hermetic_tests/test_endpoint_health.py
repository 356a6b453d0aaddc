"""Dead, frozen and failing model servers under steady load through the real Envoy (issue 13).

The favourite pod (best pinned metrics, so it gets every request) runs its simulator as its own
process: SIGKILL and SIGSTOP act on a real process, and Envoy meets a refused connection or a
silent one. Load is 100 requests/s. A watch samples, in one step of the event loop the picker
runs on, the pod's health, how often the scheduler chose it
(``inference_extension_scheduler_attempts_total``) and the scrape errors so far; so each case
asserts the behaviour, not wall-clock margins that depend on how loaded the machine is:

- killed: out of service by the first refused scrape (or Envoy's first 503, earlier); not chosen
  once out; every failed request one the dead pod held or was given before that, and none sent
  after it failed;
- frozen: suspect by the first timed-out scrape; not chosen once suspect; back in favour once
  thawed.

Each case prints the latencies it saw (the issue's targets: out within 2 scrape intervals, 1 %
of requests failed) for the record.
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

from epp.framework.health import EndpointHealth, Health
from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

SCRAPE = "--refresh-metrics-interval=50ms"  # the picker's default
BUSY = {"waiting": 3, "kv_cache_usage": 0.5}
IDLE = {"waiting": 0, "kv_cache_usage": 0.0}
RATE = 100.0  # requests per second, at most
# At most this many unanswered at once: a machine too loaded to answer 100/s gets fewer, not an
# ever-growing queue (which made every request time out, the killed pod's or not). Above what a
# frozen pod holds until it is suspect (~1 s of requests), so the load goes on around it.
MAX_IN_FLIGHT = 200
MODEL = "m"
SIM = SimConfig(model=MODEL)  # what every simulated pod serves
BODY = {"model": MODEL, "prompt": "hi", "max_tokens": 1}
ANSWER_WITHIN = 30.0  # a request still unanswered then hangs: a safety net, not a latency target


@dataclass
class Load:
    """Requests sent at a steady rate through Envoy: when each went out and what came back."""

    # (sent at, answered at, status; 0 = no answer within ANSWER_WITHIN or a broken connection)
    sent: list[tuple[float, float, int]] = field(default_factory=list)

    def failures_after(self, t: float) -> int:
        return sum(1 for at, _, status in self.sent if at >= t and status != 200)

    def failures(self) -> int:
        return sum(1 for _, _, status in self.sent if status != 200)

    def held_at(self, t: float) -> int:
        """Requests sent before ``t`` and answered after it."""
        return sum(1 for at, done, _ in self.sent if at < t < done)

    def count_after(self, t: float) -> int:
        return sum(1 for at, _, _ in self.sent if at >= t)

    def summary(self) -> str:
        statuses: dict[int, int] = {}
        for _, _, status in self.sent:
            statuses[status] = statuses.get(status, 0) + 1
        slowest = max((done - at for at, done, _ in self.sent), default=0.0)
        return f"{len(self.sent)} requests, statuses {statuses}, slowest {slowest * 1000:.0f} ms"


@asynccontextmanager
async def steady_load(url: str, *, answer_within: float = ANSWER_WITHIN) -> AsyncIterator[Load]:
    load = Load()
    pending: set[asyncio.Task[None]] = set()
    slots = asyncio.Semaphore(MAX_IN_FLIGHT)

    async def one(http: aiohttp.ClientSession, at: float) -> None:
        status = 0
        try:
            async with asyncio.timeout(answer_within), http.post(f"{url}/v1/completions", json=BODY) as resp:
                await resp.read()
                status = resp.status
        except (TimeoutError, aiohttp.ClientError):
            pass
        finally:
            slots.release()
        load.sent.append((at, time.monotonic(), status))

    async def drive(http: aiohttp.ClientSession) -> None:
        due = time.monotonic()
        while True:
            await asyncio.sleep(max(0.0, due - time.monotonic()))  # pacing, not waiting for a condition
            await slots.acquire()
            now = time.monotonic()
            due = max(due, now - 1 / RATE) + 1 / RATE  # behind (no slot, a busy loop): no burst to catch up
            task = asyncio.create_task(one(http, now))
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
class PodWatch:
    """The pod's health, how often the picker chose it and the scrape errors so far, sampled together.

    The picker runs on this event loop, so one sample is one consistent view: ``left_*`` is the
    view at the first sample where the pod's health was in ``out`` (a health change and the
    scheduling it stops happen in different steps, so nothing is chosen between them unseen).
    """

    health: Callable[[], EndpointHealth]
    routed: Callable[[], float]
    scrape_errors: Callable[[], float]  # of the one reason the case expects from this pod
    out: tuple[Health, ...] = ()
    last_routed: float = 0.0
    left_at: float | None = None
    routed_when_left: float = 0.0
    errors_when_left: float = 0.0
    reason_when_left: str = ""

    async def run(self) -> None:
        seen = self.routed()
        while True:
            now, routed = time.monotonic(), self.routed()
            if routed != seen:
                seen, self.last_routed = routed, now
            health = self.health()
            if self.left_at is None and health.state in self.out:
                self.left_at, self.routed_when_left, self.reason_when_left = now, routed, health.reason
                self.errors_when_left = self.scrape_errors()
            await asyncio.sleep(0.002)  # sampling period of the watch, not a wait for a condition

    def watch_for(self, out: tuple[Health, ...]) -> float:
        """Start looking for ``out``; return the scrape errors so far (to count those after)."""
        self.out, self.left_at = out, None
        return self.scrape_errors()


@asynccontextmanager
async def watch_pod(env: HermeticPool, pod: str, address: str, *, scrape_error: str) -> AsyncIterator[PodWatch]:
    labels = {"status": "success", "target_model_name": MODEL, "pod_name": pod, "namespace": "default"}
    labels["port"] = str(env.port)
    watch = PodWatch(
        health=lambda: endpoint_health(env, address),
        routed=lambda: env.sample("inference_extension_scheduler_attempts_total", **labels),
        scrape_errors=lambda: env.sample("epp_scrape_errors_total", reason=scrape_error),
    )
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


def endpoint_health(env: HermeticPool, address: str) -> EndpointHealth:
    return next(s.health for s in env.endpoints() if s.endpoint.hostport == address)


def health_of(env: HermeticPool, address: str) -> Health:
    return endpoint_health(env, address).state


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_killed_favourite_is_out_by_the_first_refused_scrape_and_gets_no_more_requests(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    env = await favourite_pool(epp_pool, mode)
    pod = env.processes[0]
    watching = watch_pod(env, pod.name, pod.address, scrape_error="connect")  # refused: only the dead pod's
    async with watching as watch, steady_load(env.envoy_url) as load:
        await wait_until(lambda: watch.last_routed > 0 and load.count_after(0) >= 50, timeout=10)
        errors_before = watch.watch_for((Health.UNREACHABLE, Health.EJECTED))
        killed_at, routed_before = time.monotonic(), watch.routed()
        pod.kill()
        await wait_until(lambda: watch.left_at is not None, timeout=15, message="the dead pod out of service")
        left_at = watch.left_at
        assert left_at is not None
        await wait_until(lambda: load.count_after(left_at) >= 200, timeout=30)
    given_after_kill = watch.routed_when_left - routed_before
    print(f"kill ({mode}): out {(left_at - killed_at) * 1000:.0f} ms after, {given_after_kill:.0f} given to it")
    print(f"  meanwhile; {load.summary()}; {load.held_at(killed_at)} held at the kill")
    assert health_of(env, pod.address) in (Health.UNREACHABLE, Health.EJECTED)
    # Out by the first refused scrape, or by Envoy's first 503 before it.
    assert watch.reason_when_left.startswith(("scrape connect", "Envoy answered 50"))
    assert watch.errors_when_left - errors_before <= 1
    assert watch.routed() == watch.routed_when_left  # never chosen once out
    assert load.failures_after(left_at) == 0  # nothing sent after that failed or hung
    # Only what the dead pod held or was given before it was out failed (target: 1 % of 5 s at
    # 100 req/s; how many that is depends on how long requests took on this machine).
    assert load.failures() <= load.held_at(killed_at) + given_after_kill


async def test_frozen_favourite_is_suspect_by_the_first_timed_out_scrape_and_gets_no_more_requests(
    epp_pool: PoolFactory,
) -> None:
    env = await favourite_pool(epp_pool, "v1")
    pod = env.processes[0]
    watching = watch_pod(env, pod.name, pod.address, scrape_error="timeout")
    async with watching as watch, steady_load(env.envoy_url) as load:
        await wait_until(lambda: watch.last_routed > 0 and load.count_after(0) >= 50, timeout=10)
        errors_before = watch.watch_for((Health.SUSPECT,))
        frozen_at = time.monotonic()
        pod.freeze()
        await wait_until(lambda: watch.left_at is not None, timeout=15, message="the frozen pod suspect")
        left_at = watch.left_at
        assert left_at is not None
        await wait_until(lambda: load.count_after(left_at) >= 200, timeout=30)
        routed_suspect = watch.routed()
        print(f"freeze: suspect {(left_at - frozen_at) * 1000:.0f} ms after; {load.held_at(left_at)} held by it then")
        pod.thaw()
        await wait_until(lambda: health_of(env, pod.address) is Health.HEALTHY, timeout=10)
        thawed_at = time.monotonic()
        await wait_until(lambda: watch.last_routed > thawed_at, timeout=10)  # the favourite again
    print(f"  {load.summary()}")
    # Suspect by the first timed-out scrape (on a loop stalled past the scrape timeout, others' too).
    assert watch.reason_when_left.startswith("scrape timeout")
    assert watch.errors_when_left - errors_before >= 1
    assert routed_suspect == watch.routed_when_left  # never chosen while suspect
    # The frozen pod's requests are answered once it thaws; none sent after it was suspect failed.
    assert load.failures_after(left_at) == 0


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
