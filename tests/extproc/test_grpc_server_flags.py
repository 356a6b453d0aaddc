"""Upstream's ext_proc server flags on a real server: ``--health-checking``, message sizes, stream metrics."""

from __future__ import annotations

import json

import grpc
import pytest
from extproc_harness import RECV_TIMEOUT, Running, Start, post_headers, request_body, request_headers

from epp.extproc import pb
from epp.extproc.server import ExtProcOptions
from epp_sim.waits import wait_until

SERVING = pb.HealthCheckResponse.SERVING


async def _check(channel: object, service: str) -> int:
    response = await pb.HealthStub(channel).Check(pb.HealthCheckRequest(service=service), timeout=RECV_TIMEOUT)
    return int(response.status)


async def test_health_is_on_the_ext_proc_port_only_with_health_checking(start_server: Start) -> None:
    default = await start_server()
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await _check(default.channel, pb.EXT_PROC_SERVICE)
    assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
    assert await _check(default.health_channel, pb.EXT_PROC_SERVICE) == SERVING  # the health port always

    checked = await start_server(ext_proc=ExtProcOptions(health_checking=True))
    assert await _check(checked.channel, pb.EXT_PROC_SERVICE) == SERVING


def _body(size: int) -> bytes:
    return json.dumps({"model": "m", "prompt": "x" * size}).encode()


async def _route(running: Running, body: bytes) -> str:
    """Send one request whose body is a single message; the answer's kind, or the gRPC error code."""
    call = running.open()
    try:
        await call.send(request_headers(post_headers()), request_body(body))
        head = await call.recv_one()
    except grpc.aio.AioRpcError as e:
        return e.code().name
    return str(head.WhichOneof("response"))


@pytest.mark.parametrize(
    ("options", "size", "answer"),
    [
        (ExtProcOptions(), 6 * 1024 * 1024, "request_headers"),  # unset: 32 MiB, over gRPC's 4 MiB default
        (ExtProcOptions(max_recv_msg_size=0), 6 * 1024 * 1024, "RESOURCE_EXHAUSTED"),  # 0: gRPC's 4 MiB
        (ExtProcOptions(max_recv_msg_size=8 * 1024 * 1024), 6 * 1024 * 1024, "request_headers"),
        (ExtProcOptions(max_recv_msg_size=1024), 2048, "RESOURCE_EXHAUSTED"),
        (ExtProcOptions(max_send_msg_size=64), 16, "RESOURCE_EXHAUSTED"),  # the routing answer is larger
    ],
)
async def test_message_size_limits(start_server: Start, options: ExtProcOptions, size: int, answer: str) -> None:
    running = await start_server(ext_proc=options)
    assert await _route(running, _body(size)) == answer


INFLIGHT = "llm_d_epp_extproc_streams_inflight"
ENDED = "llm_d_epp_extproc_streams_total"
DURATION = "llm_d_epp_extproc_stream_duration_seconds_count"


async def test_stream_metrics_exist_only_with_the_flag(start_server: Start) -> None:
    default = await start_server()
    await _route(default, _body(8))
    assert default.metrics.registry.get_sample_value(INFLIGHT) is None
    assert default.metrics.registry.get_sample_value(ENDED, {"code": "OK"}) is None


async def test_stream_metrics_count_open_streams_and_how_each_ended(start_server: Start) -> None:
    running = await start_server(ext_proc=ExtProcOptions(stream_metrics=True, health_checking=True))
    sample = running.metrics.registry.get_sample_value

    done = running.open()
    await done.send(request_headers(post_headers()), request_body(_body(8)))
    await done.recv(2)
    assert sample(INFLIGHT) == 1
    await done.send(pb.ProcessingRequest(response_headers=pb.HttpHeaders(end_of_stream=True)))
    await done.recv_one()
    await done.end()
    await wait_until(lambda: sample(ENDED, {"code": "OK"}) == 1, message="an OK stream counted")

    reset = running.open()  # the gateway resets the stream mid-request: its handler returns
    await reset.send(request_headers(post_headers()))
    await wait_until(lambda: sample(INFLIGHT) == 1, message="the second stream open")
    reset.call.cancel()
    await wait_until(lambda: sample(INFLIGHT) == 0, message="the reset stream closed")

    await _check(running.channel, pb.EXT_PROC_SERVICE)  # not a Process stream: not counted
    assert sample(DURATION) == 2
    assert (sample(ENDED, {"code": "OK"}) or 0) + (sample(ENDED, {"code": "Canceled"}) or 0) == 2


async def test_a_stream_whose_handler_fails_ends_unknown(start_server: Start) -> None:
    running = await start_server(ext_proc=ExtProcOptions(stream_metrics=True, max_send_msg_size=64))
    assert await _route(running, _body(8)) == "RESOURCE_EXHAUSTED"  # its answer could not be sent
    sample = running.metrics.registry.get_sample_value
    await wait_until(lambda: sample(ENDED, {"code": "Unknown"}) == 1, message="the failed stream counted")
    assert sample(INFLIGHT) == 0
