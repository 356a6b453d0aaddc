"""Anthropic Messages usage: the JSON message, and SSE streams cut at every possible boundary."""

from __future__ import annotations

from epp.extproc.usage import SseUsageScanner, Usage, usage_from_json

# A real stream's shape (Anthropic's documented events), with CRLF on one event for good measure.
STREAM = (
    b"event: message_start\n"
    b'data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",'
    b'"content":[],"model":"m","stop_reason":null,"usage":{"input_tokens":25,"cache_read_input_tokens":16,'
    b'"output_tokens":1}}}\n\n'
    b"event: content_block_start\n"
    b'data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}\n\n'
    b'event: ping\ndata: {"type": "ping"}\n\n'
    b"event: content_block_delta\n"
    b'data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"usage is"}}\r\n\r\n'
    b'event: content_block_stop\ndata: {"type":"content_block_stop","index":0}\n\n'
    b"event: message_delta\n"
    b'data: {"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},'
    b'"usage":{"output_tokens":15}}\n\n'
    b"event: message_stop\n"
    b'data: {"type":"message_stop"}'  # the last line has no line end
)
EXPECTED = Usage(prompt_tokens=25, completion_tokens=15, cached_tokens=16, total_tokens=40)


def _scan(chunks: list[bytes]) -> Usage | None:
    scanner = SseUsageScanner()
    for chunk in chunks:
        scanner.feed(chunk)
    scanner.finish()
    return scanner.usage


def test_whole_stream() -> None:
    assert _scan([STREAM]) == EXPECTED


def test_stream_cut_anywhere_in_two() -> None:
    wrong = [cut for cut in range(1, len(STREAM)) if _scan([STREAM[:cut], STREAM[cut:]]) != EXPECTED]
    assert wrong == []


def test_stream_one_byte_at_a_time() -> None:
    assert _scan([STREAM[i : i + 1] for i in range(len(STREAM))]) == EXPECTED


def test_message_start_alone_gives_the_prompt_side() -> None:
    start = STREAM[: STREAM.index(b"event: content_block_start")]
    assert _scan([start]) == Usage(25, 1, 16, 26)


def test_json_message_response() -> None:
    body = (
        b'{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi"}],'
        b'"usage":{"input_tokens":12,"output_tokens":3,"cache_read_input_tokens":4}}'
    )
    assert usage_from_json(body) == Usage(12, 3, 4, 15)


def test_count_tokens_response_has_no_usage() -> None:
    assert usage_from_json(b'{"input_tokens":12}') is None
