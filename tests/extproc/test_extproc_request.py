"""Request path over a real gRPC stream: routing answer, echo, metadata, bodies, modes, subset hints."""

from __future__ import annotations

import json
import uuid

import pytest
from extproc_harness import (
    RecordingPipeline,
    Running,
    Start,
    destination_metadata,
    endpoint,
    post_headers,
    protocol,
    request_body,
    request_headers,
    response_body,
    response_headers,
    set_headers,
    streamed,
)

from epp.extproc import pb
from epp.extproc.processor import StreamOptions
from epp.framework.request import ApiKind
from epp_sim.waits import wait_until

BODY = b'{"prompt":"hi","model":"m","max_tokens":5}'


async def test_full_duplex_routes_with_exact_headers_metadata_and_untouched_body(running: Running) -> None:
    call = running.open()
    client_headers = post_headers(
        **{
            "x-request-id": "rid-1",
            "x-gateway-inference-objective": "obj",
            "x-gateway-inference-fairness-id": "tenant-a",
            "x-gateway-destination-endpoint": "6.6.6.6:1",  # spoofed by the client: must not be echoed
            "content-length": "999",  # stale: replaced by the real length
            "x-custom": "kept",
        }
    )
    await call.send(request_headers(client_headers, config=protocol()))
    await call.send(request_body(BODY))
    head, chunk = await call.recv(2)

    assert head.WhichOneof("response") == "request_headers"
    common = head.request_headers.response
    assert common.clear_route_cache
    # Only what changes: the destination and the body's length. The client's headers go upstream as
    # they are (no echo), the spoofed destination is overwritten, the stale length replaced.
    assert set_headers(common.header_mutation) == {
        "x-gateway-destination-endpoint": b"10.0.0.1:8000",
        "Content-Length": str(len(BODY)).encode(),
    }
    assert destination_metadata(head) == "10.0.0.1:8000"
    assert list(head.dynamic_metadata.fields) == ["envoy.lb"]
    assert streamed(chunk) == (BODY, True)  # the client's bytes, not re-serialised

    ((request, subset),) = running.pipeline.routed
    # The stream only carries the request: resolving model and objective is the pipeline's job.
    assert (request.request_id, request.model, request.target_model, request.objective) == ("rid-1", "m", "", "")
    assert request.headers["x-gateway-inference-objective"] == "obj"
    assert request.api is ApiKind.COMPLETIONS and request.size == len(BODY) and not request.stream
    assert request.headers["x-gateway-inference-fairness-id"] == "tenant-a"
    assert subset is None

    labels = {"model_name": "m", "target_model_name": "m"}
    assert running.sample("inference_objective_request_total", priority="0", **labels) == 1
    assert running.sample("inference_model_request_total", **labels) == 1
    assert running.sample("inference_objective_request_sizes_sum", **labels) == len(BODY)
    assert running.sample("inference_objective_running_requests", model_name="m") == 1
    for phase in ("parse", "schedule", "respond", "total"):
        await wait_until(lambda p=phase: running.sample("epp_picker_overhead_seconds_count", phase=p) == 1)

    await call.send(response_headers({":status": "200"}, eos=True))
    assert (await call.recv_one()).WhichOneof("response") == "response_headers"
    assert await call.end() == []
    await wait_until(lambda: running.sample("inference_objective_running_requests", model_name="m") == 0)
    (finished,) = running.pipeline.finished_calls
    assert finished.completed and finished.decision is not None and finished.request is request


async def test_request_id_generated_when_absent_and_found_case_insensitively(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(BODY))
    head, _ = await call.recv(2)
    generated = set_headers(head.request_headers.response.header_mutation)["x-request-id"].decode()
    assert uuid.UUID(generated).version == 4
    assert running.pipeline.routed[0][0].request_id == generated

    call = running.open()
    await call.send(request_headers([(":path", "/v1/completions"), ("X-Request-ID", "abc")]), request_body(BODY))
    head, _ = await call.recv(2)
    assert "x-request-id" not in set_headers(head.request_headers.response.header_mutation)  # the client's stays
    assert running.pipeline.routed[1][0].request_id == "abc"


async def test_header_values_in_the_value_field_are_read_like_raw_values(running: Running) -> None:
    call = running.open()
    await call.send(request_headers({":path": "/v1/completions", "x-plain": "v"}, raw=False), request_body(BODY))
    await call.recv(2)
    assert running.pipeline.routed[0][0].headers["x-plain"] == "v"


async def test_model_rewrite_reserialises_like_go_and_chunks_at_62000(start_server: Start) -> None:
    running = await start_server(RecordingPipeline(target_model="m-v2", priority=-1))
    body_obj = {"model": "m", "stream": False, "prompt": "<b>&é" + "x" * 150_000, "z": 1, "a": [1.5, None]}
    raw = json.dumps(body_obj, indent=2).encode()
    call = running.open()
    await call.send(request_headers(post_headers(), config=protocol()), request_body(raw))
    head = await call.recv_one()
    chunks = [streamed(m) for m in await call.recv(3)]

    expected = (
        '{"a":[1.5,null],"model":"m-v2","prompt":"\\u003cb\\u003e\\u0026é' + "x" * 150_000 + '","stream":false,"z":1}'
    ).encode()
    assert [len(c) for c, _ in chunks] == [62_000, 62_000, len(expected) - 124_000]
    assert [eos for _, eos in chunks] == [False, False, True]
    assert b"".join(c for c, _ in chunks) == expected
    assert set_headers(head.request_headers.response.header_mutation)["Content-Length"] == str(len(expected)).encode()
    labels = {"model_name": "m", "target_model_name": "m-v2"}
    assert running.sample("inference_objective_request_total", priority="-1", **labels) == 1
    assert running.sample("inference_objective_request_sizes_sum", **labels) == len(expected)


async def test_rewrite_header_is_not_echoed_and_the_pipelines_target_model_is_sent(start_server: Start) -> None:
    running = await start_server(RecordingPipeline(target_model="lora-1"))
    call = running.open()
    await call.send(request_headers(post_headers(**{"x-gateway-model-name-rewrite": "lora-1"})), request_body(BODY))
    head, chunk = await call.recv(2)
    assert json.loads(streamed(chunk)[0])["model"] == "lora-1"
    assert "x-gateway-model-name-rewrite" not in set_headers(head.request_headers.response.header_mutation)


async def test_body_split_across_many_chunks_is_reassembled(running: Running) -> None:
    raw = json.dumps({"model": "m", "messages": [{"role": "user", "content": "y" * 220_000}]}).encode()
    pieces = [raw[i : i + 4096] for i in range(0, len(raw), 4096)]
    call = running.open()
    await call.send(request_headers(post_headers("/v1/chat/completions")))
    await call.send(*(request_body(p, eos=False) for p in pieces))
    await call.send(request_body(b"", eos=True))
    head, *chunks = await call.recv(5)
    assert b"".join(streamed(c)[0] for c in chunks) == raw
    assert [streamed(c)[1] for c in chunks] == [False, False, False, True]
    assert running.pipeline.routed[0][0].api is ApiKind.CHAT_COMPLETIONS


async def test_buffered_mode_acks_headers_and_routes_on_the_body_answer(start_server: Start) -> None:
    running = await start_server(RecordingPipeline(target_model="m-v2"))
    config = protocol(pb.BODY_BUFFERED)
    call = running.open()
    await call.send(request_headers(post_headers(**{"x-request-id": "b1"}), config=config))
    ack = await call.recv_one()  # Envoy sends the body only after this answer
    assert ack.WhichOneof("response") == "request_headers"
    assert ack.request_headers.response.clear_route_cache
    assert len(ack.request_headers.response.header_mutation.set_headers) == 0

    await call.send(request_body(BODY))
    answer = await call.recv_one()
    assert answer.WhichOneof("response") == "request_body"
    common = answer.request_body.response
    expected = b'{"max_tokens":5,"model":"m-v2","prompt":"hi"}'
    assert common.body_mutation.body == expected
    headers = set_headers(common.header_mutation)
    assert headers["x-gateway-destination-endpoint"] == b"10.0.0.1:8000"
    assert headers["Content-Length"] == str(len(expected)).encode()
    assert "x-request-id" not in headers  # the client's own goes upstream untouched
    assert destination_metadata(answer) == "10.0.0.1:8000"

    # BUFFERED response: one message, answered with the model name restored.
    await call.send(response_headers({":status": "200", "content-type": "application/json"}))
    assert set(set_headers((await call.recv_one()).response_headers.response.header_mutation)) == {
        "x-went-into-resp-headers"
    }
    await call.send(response_body(b'{"model":"m-v2","usage":{"completion_tokens":4}}', eos=True))
    restored = await call.recv_one()
    assert restored.response_body.response.body_mutation.body == b'{"model":"m","usage":{"completion_tokens":4}}'
    assert await call.end() == []
    assert running.sample("inference_objective_output_tokens_sum", model_name="m", target_model_name="m-v2") == 4


async def test_buffered_mode_leaves_an_unchanged_body_alone(start_server: Start) -> None:
    running = await start_server()
    call = running.open()
    await call.send(request_headers(post_headers(), config=protocol(pb.BODY_BUFFERED)))
    await call.recv_one()
    await call.send(request_body(BODY))
    common = (await call.recv_one()).request_body.response
    assert not common.HasField("body_mutation")
    assert set_headers(common.header_mutation)["Content-Length"] == str(len(BODY)).encode()


async def test_header_only_request_is_routed_at_headers(running: Running) -> None:
    call = running.open()
    await call.send(request_headers({":method": "GET", ":path": "/v1/models", "x-request-id": "g"}, eos=True))
    head = await call.recv_one()
    headers = set_headers(head.request_headers.response.header_mutation)
    assert headers["x-gateway-destination-endpoint"] == b"10.0.0.1:8000"
    assert "Content-Length" not in headers
    assert head.request_headers.response.clear_route_cache
    assert destination_metadata(head) == "10.0.0.1:8000"
    ((request, _),) = running.pipeline.headers_only
    assert request.body == {} and not running.pipeline.routed
    await wait_until(lambda: running.sample("epp_picker_overhead_seconds_count", phase="total") == 1)
    assert running.sample("epp_picker_overhead_seconds_count", phase="parse") == 0
    await call.send(response_headers({":status": "200"}, eos=True))
    await call.recv_one()
    await call.end()
    assert running.sample("inference_objective_request_total", model_name="", target_model_name="", priority="0") == 0
    assert [f.completed for f in running.pipeline.finished_calls] == [True]


async def test_ipv6_endpoints_are_bracketed_and_fallbacks_comma_joined(start_server: Start) -> None:
    pipeline = RecordingPipeline(targets=[endpoint("fd00::1", 8000, "a"), endpoint("10.0.0.2", 8001, "b")])
    running = await start_server(pipeline)
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(BODY))
    head, _ = await call.recv(2)
    expected = "[fd00::1]:8000,10.0.0.2:8001"
    assert set_headers(head.request_headers.response.header_mutation)["x-gateway-destination-endpoint"] == (
        expected.encode()
    )
    assert destination_metadata(head) == expected


@pytest.mark.parametrize(
    ("hint", "disabled", "expected_subset", "destination"),
    [
        (None, False, None, "10.0.0.1:8000,10.0.0.2:8000"),
        (["10.0.0.2:8000", "[fd00::3]:9000", 7], False, frozenset({"10.0.0.2", "fd00::3"}), "10.0.0.2:8000"),
        (["10.0.0.2:8000"], True, None, "10.0.0.1:8000,10.0.0.2:8000"),
    ],
    ids=["absent", "list", "disabled"],
)
async def test_subset_hint_reaches_the_pipeline(
    start_server: Start,
    hint: list[object] | None,
    disabled: bool,
    expected_subset: frozenset[str] | None,
    destination: str,
) -> None:
    pipeline = RecordingPipeline(targets=[endpoint("10.0.0.1", name="a"), endpoint("10.0.0.2", name="b")])
    running = await start_server(pipeline, options=StreamOptions(disable_subset_filter=disabled))
    call = running.open()
    await call.send(request_headers(post_headers(), subset=hint), request_body(BODY))
    head, _ = await call.recv(2)
    assert pipeline.routed[0][1] == expected_subset
    assert destination_metadata(head) == destination


async def test_empty_subset_hint_means_no_candidates(start_server: Start) -> None:
    running = await start_server()
    call = running.open()
    await call.send(request_headers(post_headers(), subset=[]), request_body(BODY))
    answer = await call.recv_one()
    assert running.pipeline.routed[0][1] == frozenset()
    assert answer.immediate_response.status.code == 503
