"""SSE usage as upstream's openai-parser reads it: every ``data:`` line, however the stream is cut.

The stream below is what vLLM sends for a chat completion with ``stream_options.include_usage``:
token chunks with ``"usage":null``, then a chunk with empty ``choices`` and the usage, then
``[DONE]``. It is fed cut at every byte offset, with each line ending the SSE spec allows.
"""

from __future__ import annotations

import json

import pytest

from epp.extproc.usage import SseUsageScanner, Usage

_EVENTS = [
    {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m", "choices": [{"index": 0, "delta": d}]}
    | {"usage": None}
    for d in ({"role": "assistant", "content": ""}, {"content": "Hello"}, {"content": " there"})
] + [
    {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "m",
        "choices": [],
        "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10, "prompt_tokens_details": None},
    }
]
EXPECTED = Usage(prompt_tokens=7, completion_tokens=3, total_tokens=10)


def vllm_stream(eol: bytes) -> bytes:
    lines = [b"data: " + json.dumps(e).encode() for e in _EVENTS] + [b"data: [DONE]"]
    return b"".join(line + eol + eol for line in lines)


def scan(*chunks: bytes) -> SseUsageScanner:
    scanner = SseUsageScanner()
    for chunk in chunks:
        scanner.feed(chunk)
    scanner.finish()
    return scanner


@pytest.mark.parametrize("eol", [b"\n", b"\r\n", b"\r"], ids=["LF", "CRLF", "CR"])
def test_every_split_point_of_a_real_stream(eol: bytes) -> None:
    stream = vllm_stream(eol)
    for cut in range(len(stream) + 1):
        assert scan(stream[:cut], stream[cut:]).usage == EXPECTED, cut


def test_one_byte_chunks() -> None:
    stream = vllm_stream(b"\r\n")
    assert scan(*(stream[i : i + 1] for i in range(len(stream)))).usage == EXPECTED


def test_several_data_lines_in_one_chunk_without_blank_lines_and_no_final_line_end() -> None:
    token = b'data: {"object":"chat.completion.chunk","choices":[{"delta":{"content":"x"}}],"usage":null}'
    usage = b'data: {"object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":2,"completion_tokens":1}}'
    chunk = token + b"\n" + usage + b"\ndata: [DONE]"
    assert scan(chunk).usage == Usage(2, 1)

    scanner = SseUsageScanner()
    scanner.feed(token + b"\n" + usage)  # the stream ends right after the usage event
    assert scanner.usage is None  # an unfinished line may still grow
    scanner.finish()
    assert scanner.usage == Usage(2, 1)


def test_data_without_a_space_and_other_fields_between_events() -> None:
    stream = (
        b": keep-alive comment\n"
        b"event: message\n"
        b'data:{"object":"text_completion","usage":{"prompt_tokens":4,"completion_tokens":5}}\n'
        b"id: 3\n\n"
    )
    assert scan(stream).usage == Usage(4, 5)


def test_a_line_with_usage_and_a_nested_null_usage_is_decoded() -> None:
    line = b'data: {"choices":[{"delta":{},"usage": null}],"usage":{"prompt_tokens":6,"completion_tokens":2}}\n'
    assert scan(line).usage == Usage(6, 2)
    assert scan(b'data: {"usage":null,"choices":[{"usage": null}]}\n').usage is None


def test_responses_api_completed_event_split_anywhere() -> None:
    completed = {"type": "response.completed", "response": {"usage": {"input_tokens": 9, "output_tokens": 3}}}
    stream = (
        b'event: response.created\ndata: {"type":"response.created","response":{"usage":null}}\n\n'
        b"event: response.completed\ndata: " + json.dumps(completed).encode() + b"\n\n"
    )
    for cut in range(len(stream) + 1):
        assert scan(stream[:cut], stream[cut:]).usage == Usage(9, 3), cut


def test_not_usage_lines_and_bad_json_are_skipped() -> None:
    stream = (
        b'event: usage\nid: "usage"\n'  # "usage" outside a data line
        b'data: {"usage": {"prompt_tokens": \n'  # broken JSON
        b'data: ["usage"]\n'  # JSON, not an object
        b"data: [DONE]\n"
    )
    assert scan(stream).usage is None
