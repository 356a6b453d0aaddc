"""Every error a stream can end with: status, body, counters, pipeline bookkeeping, server survival."""

from __future__ import annotations

import grpc
import pytest
from extproc_harness import (
    RecordingPipeline,
    Running,
    Start,
    post_headers,
    request_body,
    request_headers,
    response_headers,
)

from epp.errors import EppError, ErrorCode
from epp.extproc import pb
from epp.extproc.processor import StreamOptions
from epp_sim.waits import wait_until

BODY = b'{"model":"m","prompt":"hi"}'


async def _rejected(running: Running, body: bytes, path: str = "/v1/completions") -> tuple[int, str]:
    call = running.open()
    await call.send(request_headers(post_headers(path)), request_body(body))
    answer = await call.recv_one()
    assert answer.WhichOneof("response") == "immediate_response"
    assert await call.rest() == []  # the server ended the stream after the ImmediateResponse
    return answer.immediate_response.status.code, answer.immediate_response.body.decode()


@pytest.mark.parametrize(
    ("body", "path", "message"),
    [
        (b'{"model": nul', "/v1/completions", "error unmarshaling request bodyMap: "),
        (b"", "/v1/completions", "error unmarshaling request bodyMap: "),
        (b'{"model":"m","prompt":NaN}', "/v1/completions", "error unmarshaling request bodyMap: "),
        (b"[1,2]", "/v1/completions", "error unmarshaling request bodyMap: json: cannot unmarshal array into Go value"),
        (b'{"prompt":"x"}', "/v1/completions", "model not found in request body"),
        (b'{"model":7,"prompt":"x"}', "/v1/completions", "model not found in request body"),
        (b'{"model":"m"}', "/v1/completions", "invalid completions request: must have prompt field"),
        (b'{"model":"m","prompt":""}', "/v1/completions", "invalid completions request: must have prompt field"),
        (b"null", "/v1/completions", "invalid completions request: must have prompt field"),
        (b'{"model":"m","messages":[]}', "/v1/chat/completions", "invalid chat completions request: must have valid"),
        (b'{"model":"m"}', "/v1/responses", "invalid responses request: must have input field"),
        (b'{"model":"m","items":[]}', "/v1/conversations", "invalid conversations request: must have items field"),
        (b'{"model":"m"}', "/v1/embeddings?x=1", "invalid embeddings request: must have input field"),
    ],
)
async def test_bad_bodies_get_400_with_the_upstream_message(
    running: Running, body: bytes, path: str, message: str
) -> None:
    status, text = await _rejected(running, body, path)
    assert status == 400
    assert text.startswith(f"inference error: BadRequest - {message}")
    assert not running.pipeline.routed and not running.pipeline.finished_calls
    await wait_until(
        lambda: (
            running.sample(
                "inference_objective_request_error_total", model_name="", target_model_name="", error_code="BadRequest"
            )
            == 1
        )
    )


async def test_oversized_body_gets_413_as_soon_as_the_limit_is_crossed(start_server: Start) -> None:
    running = await start_server(options=StreamOptions(max_request_body_bytes=1000))
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(b"x" * 600, eos=False))
    await call.send(request_body(b"x" * 600, eos=False))  # crosses the limit; no EoS ever sent
    answer = await call.recv_one()
    assert answer.immediate_response.status.code == 413
    assert (
        answer.immediate_response.body
        == b"inference error: PayloadTooLarge - request body exceeds the limit of 1000 bytes"
    )
    assert await call.rest() == []  # stream closed without waiting for the rest of the body
    assert not running.pipeline.routed


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (EppError(ErrorCode.RESOURCE_EXHAUSTED, "system saturated, sheddable request dropped"), 429),
        (EppError(ErrorCode.SERVICE_UNAVAILABLE, "failed to find endpoint candidates for serving the request"), 503),
        (EppError(ErrorCode.NOT_FOUND, "unknown model"), 404),
    ],
)
async def test_pipeline_errors_become_immediate_responses(start_server: Start, error: EppError, status: int) -> None:
    running = await start_server(RecordingPipeline(error=error))
    code, text = await _rejected(running, BODY)
    assert (code, text) == (status, str(error))
    labels = {"model_name": "m", "target_model_name": "m", "error_code": error.code.label}
    await wait_until(lambda: running.sample("inference_objective_request_error_total", **labels) == 1)
    (finished,) = running.pipeline.finished_calls
    assert finished.decision is None and not finished.completed
    assert running.sample("inference_objective_request_total", model_name="m", target_model_name="m", priority="0") == 0
    assert running.sample("inference_objective_running_requests", model_name="m") == 0


async def test_header_only_request_with_no_pods_gets_500(start_server: Start) -> None:
    running = await start_server(RecordingPipeline(targets=[]))
    call = running.open()
    await call.send(request_headers({":method": "GET", ":path": "/v1/models"}, eos=True))
    answer = await call.recv_one()
    assert answer.immediate_response.status.code == 500
    assert answer.immediate_response.body == b"inference error: Internal - no pods available in datastore"


async def test_unexpected_pipeline_failure_is_500_and_the_server_keeps_serving(
    start_server: Start, caplog: pytest.LogCaptureFixture
) -> None:
    pipeline = RecordingPipeline(error=RuntimeError("boom"))
    running = await start_server(pipeline)
    code, text = await _rejected(running, BODY)
    assert (code, text) == (500, "inference error: Internal - internal error in the endpoint picker")
    assert any(r.exc_info and "boom" in str(r.exc_info[1]) for r in caplog.records)
    await wait_until(lambda: len(pipeline.finished_calls) == 1)

    pipeline.error = None
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(BODY))
    head, _ = await call.recv(2)
    assert head.WhichOneof("response") == "request_headers"


async def test_message_without_a_phase_gets_a_clear_500(running: Running) -> None:
    call = running.open()
    await call.send(pb.ProcessingRequest())
    answer = await call.recv_one()
    assert answer.immediate_response.status.code == 500
    assert b"malformed ProcessingRequest: no request or response phase is set" in answer.immediate_response.body


async def test_undecodable_bytes_fail_only_that_stream(running: Running) -> None:
    process = running.channel.stream_stream(
        "/envoy.service.ext_proc.v3.ExternalProcessor/Process",
        request_serializer=lambda b: b,
        response_deserializer=lambda b: b,
    )
    call = process()
    await call.write(b"\xff\xff\xff\xff garbage")
    with pytest.raises(grpc.aio.AioRpcError) as failure:
        await call.read()
    assert failure.value.code() is not grpc.StatusCode.OK

    stream = running.open()
    await stream.send(request_headers(post_headers()), request_body(BODY))
    head, _ = await stream.recv(2)
    assert head.WhichOneof("response") == "request_headers"


async def test_duplicate_request_headers_are_a_protocol_error(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_headers(post_headers()))
    answer = await call.recv_one()
    assert answer.immediate_response.status.code == 500
    assert b"request headers received twice" in answer.immediate_response.body


async def test_unsupported_body_mode_is_named(running: Running) -> None:
    call = running.open()
    config = pb.ProtocolConfiguration(request_body_mode=pb.ProcessingMode.STREAMED)
    await call.send(request_headers(post_headers(), config=config))
    answer = await call.recv_one()
    assert answer.immediate_response.status.code == 500
    assert b"unsupported ext_proc request_body_mode STREAMED" in answer.immediate_response.body


async def test_model_server_error_status_is_counted(running: Running) -> None:
    for key in (":status", "status"):
        call = running.open()
        await call.send(request_headers(post_headers()), request_body(BODY))
        await call.recv(2)
        await call.send(response_headers({key: "500"}, eos=True))
        await call.recv_one()
        await call.end()
    labels = {"model_name": "m", "target_model_name": "m", "error_code": "ModelServerError"}
    await wait_until(lambda: running.sample("inference_objective_request_error_total", **labels) == 2)
