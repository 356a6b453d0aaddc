"""The conformance suite's response hook over a real gRPC stream: the served endpoint echoed, or why not."""

from __future__ import annotations

import json

import pytest
from extproc_harness import Start, post_headers, request_body, request_headers, response_headers, set_headers

from epp.extproc import pb
from epp.extproc.processor import StreamOptions

ECHO = "x-conformance-test-served-endpoint"
HOOKS = StreamOptions(conformance_test_hooks=True)


def answered_with(metadata: dict[str, dict[str, object]] | None) -> pb.ProcessingRequest:
    message = response_headers({":status": "200", "content-type": "application/json"})
    for namespace, fields in (metadata or {}).items():
        message.metadata_context.filter_metadata[namespace].update(fields)
    return message


@pytest.mark.parametrize(
    ("metadata", "echo"),
    [
        ({"envoy.lb": {"x-gateway-destination-endpoint-served": "10.0.0.7:3000"}}, b"10.0.0.7:3000"),
        (None, b"fail: missing envoy lb metadata"),
        (
            {"envoy.lb": {"x-gateway-destination-endpoint": "10.0.0.7:3000"}},
            b"fail: missing destination endpoint served metadata",
        ),
        (
            {"envoy.lb": {"x-gateway-destination-endpoint-served": 7.0}},
            b"fail: missing destination endpoint served metadata",
        ),
    ],
)
async def test_served_endpoint_echo(
    start_server: Start, metadata: dict[str, dict[str, object]] | None, echo: bytes
) -> None:
    running = await start_server(options=HOOKS)
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(json.dumps({"model": "m", "prompt": "p"}).encode()))
    await call.recv(2)
    await call.send(answered_with(metadata))
    answer = await call.recv_one()
    headers = set_headers(answer.response_headers.response.header_mutation)
    assert headers[ECHO] == echo
    assert headers["x-went-into-resp-headers"] == b"true"


async def test_no_echo_without_the_hooks(start_server: Start) -> None:
    running = await start_server()
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(json.dumps({"model": "m", "prompt": "p"}).encode()))
    await call.recv(2)
    await call.send(answered_with({"envoy.lb": {"x-gateway-destination-endpoint-served": "10.0.0.7:3000"}}))
    answer = await call.recv_one()
    assert ECHO not in set_headers(answer.response_headers.response.header_mutation)
