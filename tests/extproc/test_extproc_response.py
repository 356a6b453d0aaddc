"""Response path over a real gRPC stream: headers, SSE pass-through, JSON usage, model name restored."""

from __future__ import annotations

import json

from extproc_harness import (
    ExtProcCall,
    RecordingPipeline,
    Running,
    Start,
    post_headers,
    protocol,
    request_body,
    request_headers,
    response_body,
    response_headers,
    response_trailers,
    set_headers,
    streamed,
)

from epp.extproc import pb
from epp.extproc.processor import StreamOptions
from epp_sim.waits import wait_until


async def _routed(running: Running, body: dict[str, object], path: str = "/v1/chat/completions") -> ExtProcCall:
    call = running.open()
    await call.send(request_headers(post_headers(path)), request_body(json.dumps(body).encode()))
    await call.recv(2)
    return call


CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def test_response_headers_are_answered_at_once_with_the_marker_only(running: Running) -> None:
    call = await _routed(running, CHAT)
    await call.send(
        response_headers(
            {
                ":status": "200",
                "content-type": "application/json",
                "content-length": "12",
                "x-up": "1",
                "x-envoy-upstream-service-time": "3",
            }
        )
    )
    answer = await call.recv_one()
    mutation = answer.response_headers.response.header_mutation
    # Only what changes: upstream's marker. The server's own headers reach the client as they are.
    assert set_headers(mutation) == {"x-went-into-resp-headers": b"true"}
    assert list(mutation.remove_headers) == []  # no rewrite planned: the upstream length stays valid


async def test_sse_chunks_pass_through_one_by_one_with_usage_split_across_chunks(running: Running) -> None:
    call = await _routed(running, {**CHAT, "stream": True})
    sse = {":status": "200", "content-type": "text/event-stream", "x-envoy-upstream-service-time": "2"}
    await call.send(response_headers(sse))
    await call.recv_one()
    events = (
        b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"a"}}],"usage":null}\n\n'
        b'data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":11,"comp'
        b'letion_tokens":6,"total_tokens":17,"prompt_tokens_details":{"cached_tokens":3}}}\n\n'
        b"data: [DONE]\n\n"
    )
    cut_a = events.index(b"completion_tokens") + 4  # inside the usage line
    pieces = [events[:40], events[40:cut_a], events[cut_a:], b""]
    for i, piece in enumerate(pieces):
        last = i == len(pieces) - 1
        await call.send(response_body(piece, eos=last))
        # Each chunk is answered before the next is sent: nothing is held back.
        assert streamed(await call.recv_one(), request=False) == (piece, last)
    assert await call.end() == []
    labels = {"model_name": "m", "target_model_name": "m"}
    assert running.sample("inference_objective_input_tokens_sum", **labels) == 11
    assert running.sample("inference_objective_output_tokens_sum", **labels) == 6
    assert running.sample("inference_objective_prompt_cached_tokens_sum", **labels) == 3
    assert running.sample("inference_objective_normalized_time_per_output_token_seconds_count", **labels) == 1
    assert running.sample("inference_objective_request_duration_seconds_count", **labels) == 1
    assert running.sample("inference_objective_response_sizes_sum", **labels) == len(events)
    assert [(f.completed, f.status, f.gateway_reply) for f in running.pipeline.finished_calls] == [(True, 200, False)]


async def test_the_pipeline_is_told_the_status_of_envoys_own_503(running: Running) -> None:
    # What Envoy 1.40 sends when it cannot connect to the chosen endpoint: a local reply with
    # only these headers (no response flags, no x-envoy-* header), then its text body.
    call = await _routed(running, CHAT)
    await call.send(response_headers({":status": "503", "content-length": "98", "content-type": "text/plain"}))
    await call.recv_one()
    await call.send(response_body(b"upstream connect error or disconnect/reset before headers.", eos=True))
    await call.recv_one()
    await wait_until(lambda: len(running.pipeline.finished_calls) == 1)
    assert [(f.completed, f.status, f.gateway_reply) for f in running.pipeline.finished_calls] == [(True, 503, True)]


async def test_json_response_is_buffered_parsed_and_sent_back_in_chunks(running: Running) -> None:
    call = await _routed(running, {"model": "m", "prompt": "x"}, "/v1/completions")
    await call.send(response_headers({":status": "200", "content-type": "application/json"}))
    await call.recv_one()
    payload = json.dumps(
        {"object": "text_completion", "text": "y" * 70_000, "usage": {"prompt_tokens": 5, "completion_tokens": 9}}
    ).encode()
    await call.send(response_body(payload[:30_000]), response_body(payload[30_000:]))
    await call.send(response_body(b"", eos=True))
    chunks = [streamed(m, request=False) for m in await call.recv(2)]
    assert [eos for _, eos in chunks] == [False, True] and len(chunks[0][0]) == 62_000
    assert b"".join(c for c, _ in chunks) == payload
    assert await call.end() == []
    labels = {"model_name": "m", "target_model_name": "m"}
    assert running.sample("inference_objective_input_tokens_sum", **labels) == 5
    assert running.sample("inference_objective_output_tokens_sum", **labels) == 9
    assert running.sample("inference_objective_prompt_cached_tokens_count", **labels) == 0  # 0 is not observed
    assert running.sample("inference_objective_response_sizes_sum", **labels) == len(payload)


async def test_target_model_is_rewritten_back_to_the_client_name(start_server: Start) -> None:
    running = await start_server(RecordingPipeline(target_model="m-lora"))
    call = await _routed(running, {**CHAT, "stream": True})
    await call.send(response_headers({":status": "200", "content-type": "text/event-stream", "content-length": "9"}))
    head = await call.recv_one()
    assert list(head.response_headers.response.header_mutation.remove_headers) == ["content-length"]
    await call.send(response_body(b'data: {"model": "m-lora","x":1}\n\n'))
    assert streamed(await call.recv_one(), request=False)[0] == b'data: {"model": "m","x":1}\n\n'

    json_call = await _routed(running, CHAT)
    await json_call.send(response_headers({":status": "200"}))
    await json_call.recv_one()
    await json_call.send(response_body(b'{"id":"1","model":"m-lora","choices":[]}', eos=True))
    assert streamed(await json_call.recv_one(), request=False) == (b'{"id":"1","model":"m","choices":[]}', True)


async def test_response_trailers_flush_buffered_body_then_answer(running: Running) -> None:
    call = await _routed(running, CHAT)
    await call.send(response_headers({":status": "200"}))
    await call.recv_one()
    await call.send(response_body(b'{"usage":{"prompt_tokens":2,"completion_tokens":1}}'))
    await call.send(response_trailers())
    flushed, trailers = await call.recv(2)
    assert streamed(flushed, request=False) == (b'{"usage":{"prompt_tokens":2,"completion_tokens":1}}', False)
    assert trailers.WhichOneof("response") == "response_trailers"
    assert await call.end() == []
    assert running.sample("inference_objective_output_tokens_count", model_name="m", target_model_name="m") == 1
    assert [f.completed for f in running.pipeline.finished_calls] == [True]


async def test_response_phase_without_request_phase_is_answered(running: Running) -> None:
    call = running.open()
    await call.send(response_headers({":status": "200", "content-type": "application/json"}))
    assert set_headers((await call.recv_one()).response_headers.response.header_mutation)["x-went-into-resp-headers"]
    await call.send(response_body(b'{"usage":{"completion_tokens":3}}', eos=True))
    assert streamed(await call.recv_one(), request=False) == (b'{"usage":{"completion_tokens":3}}', True)
    assert await call.end() == []
    assert running.sample("inference_objective_output_tokens_sum", model_name="", target_model_name="") == 3
    assert not running.pipeline.finished_calls


async def test_client_cancel_mid_stream_leaves_no_state(running: Running) -> None:
    call = await _routed(running, {**CHAT, "stream": True})
    assert running.sample("inference_objective_running_requests", model_name="m") == 1
    await call.send(response_headers({":status": "200", "content-type": "text/event-stream"}))
    await call.recv_one()
    await call.send(response_body(b"data: {}\n\n"))
    await call.recv_one()
    call.call.cancel()
    await wait_until(lambda: running.sample("inference_objective_running_requests", model_name="m") == 0)
    await wait_until(lambda: len(running.pipeline.finished_calls) == 1)
    (finished,) = running.pipeline.finished_calls
    assert not finished.completed and finished.decision is not None
    assert (
        running.sample("inference_objective_request_duration_seconds_count", model_name="m", target_model_name="m") == 0
    )


async def test_response_body_mode_none_completes_at_response_headers(start_server: Start) -> None:
    running = await start_server(RecordingPipeline(target_model="m-lora"))
    call = running.open()
    config = protocol(pb.BODY_BUFFERED, pb.BODY_NONE)
    await call.send(request_headers(post_headers("/v1/chat/completions"), config=config))
    await call.recv_one()
    await call.send(request_body(json.dumps(CHAT).encode()))
    await call.recv_one()
    await call.send(response_headers({":status": "200", "content-length": "40"}))
    head = await call.recv_one()
    # Envoy will not show us the body, so nothing is rewritten and the length stays valid.
    assert list(head.response_headers.response.header_mutation.remove_headers) == []
    assert [f.completed for f in running.pipeline.finished_calls] == [True]
    labels = {"model_name": "m", "target_model_name": "m-lora"}
    assert running.sample("inference_objective_request_duration_seconds_count", **labels) == 1


async def test_streamed_response_mode_answers_every_message_and_reads_usage_at_the_end(start_server: Start) -> None:
    running = await start_server(RecordingPipeline(target_model="m-lora"))
    call = running.open()
    await call.send(
        request_headers(post_headers("/v1/chat/completions"), config=protocol(response_mode=pb.ProcessingMode.STREAMED))
    )
    await call.send(request_body(json.dumps(CHAT).encode()))
    await call.recv(2)
    await call.send(response_headers({":status": "200", "content-type": "application/json"}))
    await call.recv_one()
    await call.send(response_body(b'{"model":"m-lora","usage":{"prompt_tokens":'))
    first = (await call.recv_one()).response_body.response
    assert first.body_mutation.body == b'{"model":"m","usage":{"prompt_tokens":'
    await call.send(response_body(b'8,"completion_tokens":2}}', eos=True))
    second = (await call.recv_one()).response_body.response
    assert not second.HasField("body_mutation")  # unchanged chunk: left as Envoy has it
    assert await call.end() == []
    labels = {"model_name": "m", "target_model_name": "m-lora"}
    assert running.sample("inference_objective_input_tokens_sum", **labels) == 8


async def test_oversized_json_response_is_passed_through_instead_of_held(start_server: Start) -> None:
    running = await start_server(
        RecordingPipeline(target_model="m-lora"), options=StreamOptions(max_response_buffer_bytes=100)
    )
    call = await _routed(running, CHAT)
    await call.send(response_headers({":status": "200", "content-type": "application/json"}))
    await call.recv_one()
    await call.send(response_body(b'{"model":"m-lora","text":"' + b"a" * 60))
    await call.send(response_body(b"b" * 60))  # crosses 100 bytes: what is held is flushed, without EoS
    assert streamed(await call.recv_one(), request=False) == (b'{"model":"m","text":"' + b"a" * 60 + b"b" * 60, False)
    await call.send(response_body(b'c"}', eos=True))  # from now on each chunk passes straight through
    assert streamed(await call.recv_one(), request=False) == (b'c"}', True)
    assert await call.end() == []
    assert [f.completed for f in running.pipeline.finished_calls] == [True]


async def test_response_plugins_metadata_rides_on_the_last_answer_only(running: Running) -> None:
    pipeline = running.pipeline
    pipeline.response_metadata = {"envoy.lb": {"x-gateway-inference-request-cost": 17.0}}
    call = await _routed(running, {**CHAT, "stream": True})
    await call.send(response_headers({":status": "200", "content-type": "text/event-stream"}))
    assert not (await call.recv_one()).HasField("dynamic_metadata")
    usage = (
        b'data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":11,"completion_tokens":6}}\n\n'
    )
    await call.send(response_body(b'data: {"choices":[]}\n\n'))
    assert not (await call.recv_one()).HasField("dynamic_metadata")
    await call.send(response_body(usage + b"data: [DONE]\n\n", eos=True))
    last = await call.recv_one()
    fields = last.dynamic_metadata.fields["envoy.lb"].struct_value.fields
    assert fields["x-gateway-inference-request-cost"].number_value == 17.0
    await call.end()
    (seen_usage, status), *_ = pipeline.completed_responses
    assert (seen_usage.prompt_tokens, seen_usage.completion_tokens, status) == (11, 6, 200)
    # The response's moments for latency learning: routed, then its first body byte, then its end.
    (timing,) = pipeline.timings
    assert timing is not None and timing.first_byte_at is not None
    assert 0 < timing.routed_at < timing.first_byte_at < timing.ended_at


async def test_a_response_that_never_completes_tells_no_response_plugin(running: Running) -> None:
    pipeline = running.pipeline
    call = await _routed(running, CHAT)
    await call.send(response_headers({":status": "200", "content-type": "application/json"}))
    await call.recv_one()
    await call.send(response_body(b'{"partial":'))
    await call.end()
    await wait_until(lambda: len(pipeline.finished_calls) == 1)
    assert pipeline.completed_responses == []
