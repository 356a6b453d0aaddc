"""The picker ends each ext_proc RPC itself once the exchange is complete, instead of leaving it to the gateway."""

from __future__ import annotations

import asyncio

import grpc
from extproc_harness import Running, post_headers, request_body, request_headers, response_body, response_headers

from epp.extproc import pb

BODY = b'{"prompt":"hi","model":"m"}'


async def _ends_with_ok(call: grpc.aio.StreamStreamCall) -> None:
    """The server ended the RPC: EOF without the client half-closing, and status OK."""
    assert await asyncio.wait_for(call.read(), 5) is grpc.aio.EOF
    assert await call.code() == grpc.StatusCode.OK


async def test_the_rpc_ends_after_the_response_end_of_stream(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(BODY))
    await call.recv(2)
    await call.send(response_headers({":status": "200", "content-type": "application/json"}))
    await call.recv_one()
    await call.send(response_body(b'{"usage":{}}', eos=True))
    last = await call.recv_one()
    assert last.response_body.response.body_mutation.streamed_response.end_of_stream
    await _ends_with_ok(call.call)


async def test_the_rpc_ends_after_headers_that_end_the_response(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(BODY))
    await call.recv(2)
    await call.send(response_headers({":status": "204"}, eos=True))
    assert (await call.recv_one()).HasField("response_headers")
    await _ends_with_ok(call.call)


async def test_the_rpc_ends_after_an_immediate_response_sent_as_the_first_answer(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(b'{"model": '))
    answer = await call.recv_one()
    assert answer.immediate_response.status.code == 400
    await _ends_with_ok(call.call)


async def test_a_response_still_under_way_keeps_the_rpc_open(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(BODY))
    await call.recv(2)
    await call.send(response_headers({":status": "200", "content-type": "text/event-stream"}))
    await call.recv_one()
    await call.send(response_body(b"data: {}\n\n"))
    await call.recv_one()
    read = asyncio.ensure_future(call.call.read())
    done, _ = await asyncio.wait([read], timeout=0.2)  # nothing more comes while the response streams
    assert not done
    await call.send(response_body(b"data: [DONE]\n\n", eos=True))
    assert isinstance(await read, pb.ProcessingResponse)
    await _ends_with_ok(call.call)
