"""A stream keeps the pipeline of its request's pool for the whole request, with one pool or many."""

from __future__ import annotations

from extproc_harness import (
    RecordingPipeline,
    RecordingPools,
    Start,
    endpoint,
    post_headers,
    request_body,
    request_headers,
)

from epp.errors import EppError, ErrorCode
from epp_sim.stack.extproc_client import response_headers

BODY = b'{"prompt":"hi","model":"m"}'


def pools() -> tuple[RecordingPipeline, RecordingPipeline, RecordingPools]:
    first = RecordingPipeline(targets=[endpoint("10.0.0.1")])
    second = RecordingPipeline(targets=[endpoint("10.0.1.1")])
    return first, second, RecordingPools({("ns", "first"): first, ("ns", "second"): second})


async def test_the_named_pool_routes_and_is_told_when_the_request_is_over(start_server: Start) -> None:
    first, second, dispatcher = pools()
    running = await start_server(pipelines=dispatcher)
    call = running.open()
    await call.send(request_headers(post_headers(**{"x-gateway-inference-pool": "ns/second"})), request_body(BODY))
    await call.recv(2)
    await call.send(response_headers({":status": "200"}, eos=True))
    await call.recv_one()
    await call.end()

    assert (len(first.routed), len(second.routed)) == (0, 1)
    assert first.finished_calls == []
    ((done),) = second.finished_calls
    assert done.completed and done.decision is not None


async def test_a_failed_route_is_finished_by_its_pool_the_same_with_one_pool_or_many(start_server: Start) -> None:
    failing = EppError(ErrorCode.SERVICE_UNAVAILABLE, "no candidates")
    first, second, dispatcher = pools()
    second.error = failing
    alone = RecordingPipeline(error=failing)
    for pipelines, told in ((dispatcher, second), (RecordingPools({("ns", "second"): alone}), alone)):
        running = await start_server(pipelines=pipelines)
        call = running.open()
        await call.send(request_headers(post_headers(**{"x-gateway-inference-pool": "second"})), request_body(BODY))
        (answer,) = await call.end()
        assert answer.immediate_response.status.code == 503
        ((done),) = told.finished_calls
        assert done.decision is None and not done.completed
    assert first.finished_calls == []


async def test_a_pool_not_served_is_404_and_no_pipeline_is_involved(start_server: Start) -> None:
    first, second, dispatcher = pools()
    running = await start_server(pipelines=dispatcher)
    call = running.open()
    await call.send(request_headers(post_headers(**{"x-gateway-inference-pool": "ns/third"})), request_body(BODY))
    (answer,) = await call.end()
    assert answer.immediate_response.status.code == 404
    assert b"unknown inference pool 'ns/third'" in answer.immediate_response.body
    assert first.routed == second.routed == first.finished_calls == second.finished_calls == []
