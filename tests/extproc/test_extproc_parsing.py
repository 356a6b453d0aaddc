"""Pure parsing pieces: Go-compatible JSON, usage from JSON and SSE, subset IPs."""

from __future__ import annotations

import json

import pytest

from epp.errors import EppError
from epp.extproc.request_body import parse_request_body, serialize_go
from epp.extproc.stream import StreamOptions
from epp.extproc.subset_hint import subset_ips
from epp.extproc.usage import SseUsageScanner, Usage, usage_from_json
from epp.framework.request import ApiKind


def test_parse_returns_the_decoded_dict_itself() -> None:
    parsed = parse_request_body(b'{"model":"m","prompt":[1,2],"stream":true}', ApiKind.COMPLETIONS)
    assert (parsed.model, parsed.stream, parsed.api) == ("m", True, ApiKind.COMPLETIONS)
    parsed.body["model"] = "x"
    assert parsed.body == {"model": "x", "prompt": [1, 2], "stream": True}


def test_what_go_decodes_is_decoded_and_what_go_refuses_is_refused() -> None:
    huge = parse_request_body(
        b'{"model": "m", "prompt": "p", "seed": 123456789012345678901234567890}', ApiKind.COMPLETIONS
    )
    assert huge.body["seed"] == 1.2345678901234568e29  # past 64 bits: a float64, as Go decodes it
    for constant in (b"NaN", b"Infinity", b"-Infinity"):
        with pytest.raises(EppError, match="error unmarshaling request bodyMap: invalid character"):
            parse_request_body(b'{"model": "m", "prompt": "p", "temperature": ' + constant + b"}", ApiKind.COMPLETIONS)


def test_non_object_json_names_the_kind() -> None:
    with pytest.raises(EppError, match="cannot unmarshal string into Go value"):
        parse_request_body(b'"text"', ApiKind.COMPLETIONS)


def test_serialize_go_sorts_compacts_and_escapes_like_encoding_json() -> None:
    body = {"z": 1, "a": {"y": "<&>", "b": "\u2028\u2029é"}, "m": [True, None, 0.5]}
    assert (
        serialize_go(body)
        == '{"a":{"b":"\\u2028\\u2029é","y":"\\u003c\\u0026\\u003e"},"m":[true,null,0.5],"z":1}'.encode()
    )


def test_serialize_go_keeps_lone_surrogates_escaped() -> None:
    body = json.loads(b'{"p":"\\ud800<"}')
    assert serialize_go(body) == b'{"p":"\\ud800\\u003c"}'


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
