"""The server's part of a graceful drain: the health port drains, the ext_proc port keeps serving,
and the stop after the window cancels what is still open when its grace runs out."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from extproc_harness import RECV_TIMEOUT, Running, Start, post_headers, request_body, request_headers

from epp.extproc import pb
from epp.extproc.server import ExtProcOptions
from epp_sim.stack.extproc_client import ExtProcCall

SERVING = pb.HealthCheckResponse.SERVING
NOT_SERVING = pb.HealthCheckResponse.NOT_SERVING
NAMES = ("", "liveness", "readiness", pb.EXT_PROC_SERVICE, "inference-extension")


async def _statuses(channel: grpc.aio.Channel) -> dict[str, int]:
    stub = pb.HealthStub(channel)
    return {n: (await stub.Check(pb.HealthCheckRequest(service=n), timeout=RECV_TIMEOUT)).status for n in NAMES}


async def _open(running: Running) -> ExtProcCall:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"p"}'))
    head, _ = await call.recv(2)
    assert head.WhichOneof("response") == "request_headers"
    return call


async def test_drain_turns_the_health_port_not_serving_and_keeps_serving_streams(start_server: Start) -> None:
    running = await start_server(ext_proc=ExtProcOptions(health_checking=True))
    watch = pb.HealthStub(running.health_channel).Watch(pb.HealthCheckRequest(service="readiness"))
    assert (await asyncio.wait_for(watch.read(), RECV_TIMEOUT)).status == SERVING
    before = await _open(running)

    running.server.drain()
    assert (await asyncio.wait_for(watch.read(), RECV_TIMEOUT)).status == NOT_SERVING
    running.server.set_ready(True)  # readiness cannot undo a drain
    assert await _statuses(running.health_channel) == {
        "": NOT_SERVING,
        "liveness": SERVING,
        "readiness": NOT_SERVING,
        pb.EXT_PROC_SERVICE: NOT_SERVING,
        "inference-extension": NOT_SERVING,
    }
    # The ext_proc port's health (a gateway's active check) keeps its status: streams still come.
    assert set((await _statuses(running.channel)).values()) == {SERVING}
    await (await _open(running)).end()  # a new stream during the drain
    await before.send(pb.ProcessingRequest(response_headers=pb.HttpHeaders(end_of_stream=True)))
    assert (await before.recv_one()).WhichOneof("response") == "response_headers"
    assert await before.end() == []

    running.server.health.shutdown()  # the Watch stayed open through the drain; the stop ends it
    assert await asyncio.wait_for(watch.read(), RECV_TIMEOUT) is grpc.aio.EOF


async def test_stop_cancels_streams_still_open_when_the_grace_runs_out(start_server: Start) -> None:
    running = await start_server()
    call = await _open(running)  # never finished by the client
    await asyncio.wait_for(running.server.stop(0.2), RECV_TIMEOUT)
    with pytest.raises(grpc.aio.AioRpcError) as cut:
        await call.rest()
    assert cut.value.code() == grpc.StatusCode.UNAVAILABLE  # grpc: "Cancelling all calls"
    assert [f.completed for f in running.pipeline.finished_calls] == [False]
