"""Graceful drain of a real ``epp serve`` process behind a real Envoy: SIGTERM, SIGTERM twice, SIGINT.

On SIGTERM the picker says NOT_SERVING on its health port at once, keeps serving ext_proc streams,
new and open, for ``--drain-timeout``, then stops taking streams, lets open ones finish and exits
0 by itself; a second signal, or SIGINT, stops it at once. Envoy's own counters must show no
failed or timed-out ext_proc stream. The first test streams a 20-second SSE answer across the drain.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import signal
from collections.abc import AsyncIterator

import aiohttp
import grpc
import pytest

from epp.extproc import pb
from epp.runtime import Runtime
from epp.tasks import cancel_and_wait
from epp_sim.modelserver.config import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.envoy import ext_proc_problems
from epp_sim.stack.extproc_client import ExtProcClient, post_headers, request_body, request_headers
from epp_sim.stack.local import LocalStack, StackConfig
from epp_sim.stack.picker import PickerProcess
from epp_sim.stack.pool_spec import PoolSpec
from epp_sim.waits import wait_until

MODEL = "drain-model"
# Engine steps of 0.5 s: a 40-token stream takes ~20 s, a 2-token answer ~1.5 s.
SLOW = SimConfig(model=MODEL, decode_time_base=0.5)
SSE_TOKENS = 40
DRAIN = 6.0
SERVING = pb.HealthCheckResponse.SERVING
NOT_SERVING = pb.HealthCheckResponse.NOT_SERVING


async def _status(target: str, service: str) -> int:
    async with grpc.aio.insecure_channel(target) as channel:
        response = await pb.HealthStub(channel).Check(pb.HealthCheckRequest(service=service), timeout=2.0)
        status: int = response.status
        return status


def _exited(picker: PickerProcess) -> bool:
    return picker.child.returncode is not None


async def _complete(http: aiohttp.ClientSession, url: str, prompt: str) -> int:
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 2}
    async with http.post(f"{url}/v1/completions", json=body) as resp:
        await resp.read()
        return resp.status


@pytest.fixture
async def slow_stack() -> AsyncIterator[LocalStack]:
    config = StackConfig(pods=2, envoy_port=0, picker_args=(f"--drain-timeout={DRAIN:g}s",))
    async with LocalStack(config, pool=PoolSpec(sim_config=SLOW)) as stack:
        yield stack


@pytest.mark.timeout(90)
async def test_sigterm_drains_an_sse_stream_and_new_requests_then_exits_0(slow_stack: LocalStack) -> None:
    stack = slow_stack
    picker = stack.picker
    assert isinstance(picker, PickerProcess)
    sse_events: list[bytes] = []
    sse_started = asyncio.Event()

    async def stream(http: aiohttp.ClientSession) -> int:
        body = {"model": MODEL, "prompt": "tell me", "max_tokens": SSE_TOKENS, "stream": True}
        async with http.post(f"{stack.envoy_url}/v1/completions", json=body) as resp:
            async for line in resp.content:
                if line.startswith(b"data: "):
                    sse_events.append(line.strip())
                    sse_started.set()
            return resp.status

    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
        sse = asyncio.create_task(stream(http), name="test-sse")
        try:
            await asyncio.wait_for(sse_started.wait(), 10)
            loop = asyncio.get_running_loop()
            os.kill(picker.pid, signal.SIGTERM)
            signalled = loop.time()

            # Readiness goes NOT_SERVING at once; liveness stays SERVING, as does the ext_proc port's health.
            await wait_until(
                lambda: _is(picker.health_target, "readiness", NOT_SERVING), timeout=DRAIN, message="NOT_SERVING"
            )
            assert await _status(picker.health_target, "liveness") == SERVING
            assert await _status(picker.grpc_target, pb.EXT_PROC_SERVICE) == SERVING

            # Requests sent during the drain window are answered (two rounds, one after the other).
            for round_ in range(2):
                requests = (_complete(http, stack.envoy_url, f"r{round_}-{i}") for i in range(4))
                assert await asyncio.gather(*requests) == [200] * 4
            assert loop.time() - signalled < DRAIN  # all of it inside the window
            assert not _exited(picker)

            # The SSE answer that began before SIGTERM streams to its end, well past the window.
            assert await asyncio.wait_for(sse, 40) == 200
            assert sse_events[-1] == b"data: [DONE]"
            assert len(sse_events) >= SSE_TOKENS
            assert loop.time() - signalled > DRAIN
        finally:
            await cancel_and_wait(sse)

        await wait_until(lambda: _exited(picker), timeout=10, message="the picker exits by itself")
        assert picker.child.returncode == 0
        counters = await stack.envoy.counters()
    # No stream failed, timed out, was failed open or reset by the picker; no client got a 5xx.
    # (cluster.ext_proc.upstream_cx_protocol_error may count 1: Envoy closes the connection the
    # picker sent GOAWAY on as its last stream ends, while still reading it; any grpc stop does that.)
    assert counters["http.inference.ext_proc.streams_started"] == 1 + 8
    assert counters["http.inference.ext_proc.streams_closed"] == 1 + 8
    assert ext_proc_problems(counters) == {}
    assert counters["http.inference.downstream_rq_5xx"] == 0


async def _is(target: str, service: str, status: int) -> bool:
    try:
        return await _status(target, service) == status
    except grpc.aio.AioRpcError:
        return False


@pytest.mark.parametrize(
    ("signals", "code"),
    [((signal.SIGTERM, signal.SIGTERM), 1), ((signal.SIGINT,), 0)],
    ids=["sigterm-twice", "sigint"],
)
async def test_second_sigterm_or_sigint_stops_at_once(signals: tuple[signal.Signals, ...], code: int) -> None:
    config = StackConfig(pods=1, envoy=False, picker_args=("--drain-timeout=60s",))
    async with LocalStack(config, pool=PoolSpec()) as stack, ExtProcClient(stack.picker.grpc_target) as client:
        picker = stack.picker
        assert isinstance(picker, PickerProcess)
        # A stream left open (routed, no response yet): a graceful stop would wait for it.
        call = client.open()
        await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"p"}'))
        await call.recv(2)
        os.kill(picker.pid, signals[0])
        if len(signals) > 1:  # the drain has begun when the second signal comes
            await wait_until(lambda: _is(picker.health_target, "readiness", NOT_SERVING), timeout=20)
            os.kill(picker.pid, signals[1])
        # "At once": well inside the 60 s drain it would otherwise wait out (a loaded machine is slow).
        await wait_until(lambda: _exited(picker), timeout=20, message="the picker stops at once")
        assert picker.child.returncode == code


def _ready_gauge(runtime: Runtime) -> float | None:
    return runtime.metrics.registry.get_sample_value("epp_ready")


async def test_drain_releases_the_lease_and_keeps_serving(
    epp_pool: PoolFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    env = await epp_pool("v1", pods=1)
    options = dataclasses.replace(env.runtime.options, leader_election=True)
    monkeypatch.setenv("POD_NAME", "epp-first")
    first = Runtime(options, rng=random.Random(1), readiness_interval=0.02)
    await first.start()
    try:
        await wait_until(lambda: _ready_gauge(first) == 1, timeout=10, message="first picker leads: epp_ready 1")
        monkeypatch.setenv("POD_NAME", "epp-second")
        async with Runtime(options, rng=random.Random(2), readiness_interval=0.02) as second:
            await wait_until(lambda: second.pools[0].synced, timeout=10, message="follower synced")
            assert _ready_gauge(second) == 0  # synced, but the lease is held by the first
            await first.drain()
            assert _ready_gauge(first) == 0  # from the start of the drain
            # "At once": well before the 15 s lease would expire by itself.
            await wait_until(lambda: _ready_gauge(second) == 1, timeout=7, message="the follower takes over at once")
            target = f"127.0.0.1:{first.ports.grpc}"
            assert await _status(f"127.0.0.1:{first.ports.health}", "readiness") == NOT_SERVING
            async with ExtProcClient(target) as client:  # the drained picker still routes
                routed = await client.route({"model": "m", "prompt": "p"})
            assert routed.status == 200
            assert routed.endpoint == env.hostport(0)
    finally:
        await first.stop(0)
