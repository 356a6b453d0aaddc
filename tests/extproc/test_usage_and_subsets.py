"""Pure parsing pieces of the stream: usage from JSON and SSE, subset IPs."""

from __future__ import annotations

import json

import pytest

from epp.extproc.processor import StreamOptions
from epp.extproc.subset_hint import subset_ips
from epp.extproc.usage import SseUsageScanner, Usage, usage_from_json


@pytest.mark.parametrize(
    ("body", "usage"),
    [
        (
            {"object": "chat.completion", "usage": {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}},
            Usage(3, 4, 0, 7),
        ),
        ({"object": "response", "usage": {"input_tokens": 5, "output_tokens": 6}}, Usage(5, 6)),
        ({"object": "conversation", "usage": {"input_tokens": 1, "output_tokens": 2}}, Usage(1, 2)),
        ({"usage": {"input_tokens": 8, "output_tokens": 9}}, Usage(8, 9)),
        ({"usage": {"prompt_tokens": 8, "prompt_tokens_details": {"cached_tokens": 5}}}, Usage(8, 0, 5)),
        ({"usage": {"prompt_tokens": True, "completion_tokens": "3"}}, Usage()),
        ({"usage": None}, None),
        ({"id": 1}, None),
    ],
)
def test_usage_from_json(body: dict[str, object], usage: Usage | None) -> None:
    assert usage_from_json(json.dumps(body).encode()) == usage


def test_usage_from_json_ignores_invalid_json() -> None:
    assert usage_from_json(b'{"usage": {') is None


def test_sse_scanner_handles_split_lines_crlf_done_and_a_final_unterminated_line() -> None:
    scanner = SseUsageScanner()
    stream = (
        b'data: {"usage":null}\r\n\r\n'
        b'data: {"object":"text_completion","usage":{"prompt_tokens":1,"completion_tokens":2}}\r\n\r\n'
        b"data: [DONE]\r\n\r\n"
    )
    for i in range(0, len(stream), 7):
        scanner.feed(stream[i : i + 7])
    assert scanner.usage == Usage(1, 2)

    tail_only = SseUsageScanner()
    tail_only.feed(b'data: {"usage":{"prompt_tokens":4,')
    tail_only.feed(b'"completion_tokens":5}}')
    assert tail_only.usage is None
    tail_only.finish()
    assert tail_only.usage == Usage(4, 5)


def test_sse_scanner_reads_responses_api_completed_event_and_keeps_the_last_usage() -> None:
    scanner = SseUsageScanner()
    scanner.feed(b'event: response.created\ndata: {"type":"response.created","response":{"usage":null}}\n\n')
    assert scanner.usage is None
    scanner.feed(b'data: {"usage":{"prompt_tokens":1,"completion_tokens":1}}\n\n')
    completed = {"type": "response.completed", "response": {"usage": {"input_tokens": 9, "output_tokens": 3}}}
    scanner.feed(b"data: " + json.dumps(completed).encode() + b"\n\n")
    assert scanner.usage == Usage(9, 3)


def test_subset_ips_strip_ports_and_brackets() -> None:
    assert subset_ips(["10.0.0.1:8000", "[fd00::1]:80", "10.0.0.2", "fd00::2"]) == {
        "10.0.0.1",
        "fd00::1",
        "10.0.0.2",
        "fd00::2",
    }


def test_stream_options_are_validated() -> None:
    with pytest.raises(ValueError, match="chunk_size"):
        StreamOptions(chunk_size=70_000)
    with pytest.raises(ValueError, match="max_request_body_bytes"):
        StreamOptions(max_request_body_bytes=0)
