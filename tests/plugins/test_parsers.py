"""Request parsers: path → API by the configured parsers, and each API's bodies (good and malformed),
its prompt, its output cap and its model rewrite, as the llm-d router's parsers."""

from __future__ import annotations

import json

import orjson
import pytest

from epp.errors import EppError, ErrorCode
from epp.framework.parsing import ParsedBody, Parser, ParserTable, request_path
from epp.framework.request import ApiKind
from epp.plugins.parsers import (
    ANTHROPIC_TYPE,
    DEFAULT_PARSER_TYPES,
    OPENAI_TYPE,
    PASSTHROUGH_TYPE,
    VLLM_HTTP_TYPE,
    parser_of_type,
)
from epp.plugins.parsers._json import serialize_go


def ParserPlugin(type_name: str, name: str = "") -> Parser:
    parser = parser_of_type(type_name, name)
    assert isinstance(parser, Parser)
    return parser


DEFAULT = ParserTable(ParserPlugin(t) for t in DEFAULT_PARSER_TYPES)
_BY_API = {api: parser for parser in DEFAULT.parsers for _, api in parser.claims}


def parse_request_body(raw: bytes, api: ApiKind) -> ParsedBody:
    """``raw`` read by the default parser that claims ``api`` (the passthrough parser for the rest)."""
    return _BY_API.get(api, ParserPlugin(PASSTHROUGH_TYPE)).parse(raw, api)


def test_parse_returns_the_decoded_dict_itself() -> None:
    parsed = parse_request_body(b'{"model":"m","prompt":[1,2],"stream":true}', ApiKind.COMPLETIONS)
    assert (parsed.model, parsed.stream, parsed.api) == ("m", True, ApiKind.COMPLETIONS)
    assert parsed.body == {"model": "m", "prompt": [1, 2], "stream": True}


def test_a_model_rewrite_is_a_new_body_and_leaves_the_clients_as_sent() -> None:
    parser = ParserPlugin(OPENAI_TYPE)
    parsed = parser.parse(b'{"prompt":"<p>","model":"m","max_tokens":3}', ApiKind.COMPLETIONS)
    assert parser.with_model(parsed, "m-v2") == rb'{"max_tokens":3,"model":"m-v2","prompt":"\u003cp\u003e"}'
    assert parsed.body == {"prompt": "<p>", "model": "m", "max_tokens": 3}
    passthrough = ParserPlugin(PASSTHROUGH_TYPE)
    assert passthrough.with_model(passthrough.parse(b"opaque", ApiKind.PASSTHROUGH), "m-v2") is None


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
    ("path", "api"),
    [
        ("/v1/chat/completions", ApiKind.CHAT_COMPLETIONS),
        ("/v1/completions", ApiKind.COMPLETIONS),
        ("/v1/chat/completions/render", ApiKind.CHAT_COMPLETIONS),
        ("/v1/responses/", ApiKind.RESPONSES),
        ("/v1/conversations", ApiKind.CONVERSATIONS),
        ("/v1/embeddings", ApiKind.EMBEDDINGS),
        ("/v1/images/generations", ApiKind.IMAGES_GENERATIONS),
        ("/v1/messages", ApiKind.MESSAGES),
        ("/anthropic/v1/messages/count_tokens", ApiKind.COUNT_TOKENS),  # the longer claim wins
        ("/inference/v1/generate", ApiKind.GENERATE),
        ("/v1/models/x/predict", ApiKind.PASSTHROUGH),  # nobody claims it: the fallback
    ],
)
def test_default_parsers_resolve_by_longest_suffix(path: str, api: ApiKind) -> None:
    assert DEFAULT.resolve(path)[1] is api


def test_request_path_drops_the_query_and_defaults_to_completions() -> None:
    assert request_path({":path": "/v1/messages?beta=true"}) == "/v1/messages"
    assert request_path({"x-forwarded-path": "/a/embeddings"}) == "/a/embeddings"
    assert request_path({}) == "/v1/completions"


def test_an_explicit_list_has_no_fallback_and_refuses_what_it_does_not_claim() -> None:
    table = ParserTable([ParserPlugin(OPENAI_TYPE)])
    with pytest.raises(EppError) as err:
        table.resolve("/v1/messages")
    assert err.value.code is ErrorCode.BAD_REQUEST
    assert "no parser registered matching path suffix for: /v1/messages" in str(err.value)


def test_parsers_after_the_fallback_and_repeated_types_are_skipped() -> None:
    table = ParserTable(
        [
            ParserPlugin(OPENAI_TYPE, "a"),
            ParserPlugin(OPENAI_TYPE, "b"),
            ParserPlugin(PASSTHROUGH_TYPE),
            ParserPlugin(ANTHROPIC_TYPE),
        ]
    )
    assert [p.typed_name.name for p in table.parsers] == ["a", PASSTHROUGH_TYPE]
    assert table.resolve("/v1/messages")[1] is ApiKind.PASSTHROUGH


ANTHROPIC_BODY = {
    "model": "claude-like",
    "max_tokens": 256,
    "system": [{"type": "text", "text": "You are terse."}],
    "messages": [
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "42"}]},
    ],
    "stream": True,
}


def test_anthropic_messages_body() -> None:
    parsed = parse_request_body(orjson.dumps(ANTHROPIC_BODY), ApiKind.MESSAGES)
    assert (parsed.model, parsed.stream, parsed.max_output_tokens) == ("claude-like", True, 256)
    assert parsed.body["system"] == ANTHROPIC_BODY["system"]


def test_anthropic_model_is_optional_as_upstream() -> None:
    parsed = parse_request_body(b'{"messages":[{"role":"user","content":"x"}]}', ApiKind.COUNT_TOKENS)
    assert (parsed.model, parsed.stream, parsed.max_output_tokens) == ("", False, None)


@pytest.mark.parametrize(
    ("api", "raw", "message"),
    [
        (ApiKind.MESSAGES, b'{"model":"m"}', "invalid messages request: must have at least one message"),
        (ApiKind.MESSAGES, b'{"model":"m","messages":[]}', "invalid messages request: must have at least one message"),
        (ApiKind.MESSAGES, b'{"model":"m","messages":"hi"}', "invalid messages request"),
        (ApiKind.COUNT_TOKENS, b'{"model":"m","messages":{}}', "invalid messages request"),
        (ApiKind.MESSAGES, b'{"model":"m","messages":[', "error unmarshaling request bodyMap"),
        (ApiKind.GENERATE, b'{"token_ids":[]}', "invalid generate request: must have non-empty token_ids field"),
        (ApiKind.GENERATE, b'{"prompt":"x"}', "must have non-empty token_ids field"),
        (ApiKind.IMAGES_GENERATIONS, b'{"model":"m"}', "invalid images generations request: must have prompt field"),
        (ApiKind.CHAT_COMPLETIONS, b'{"messages":[{"role":"user","content":"x"}]}', "model not found in request body"),
    ],
)
def test_malformed_bodies_are_400s_naming_the_field(api: ApiKind, raw: bytes, message: str) -> None:
    with pytest.raises(EppError) as err:
        parse_request_body(raw, api)
    assert err.value.code is ErrorCode.BAD_REQUEST
    assert message in str(err.value)


def test_vllm_generate_body_reads_the_cap_from_sampling_params() -> None:
    raw = b'{"model":"m","token_ids":[1,2,3],"sampling_params":{"max_tokens":7},"stream":true}'
    parsed = parse_request_body(raw, ApiKind.GENERATE)
    assert (parsed.model, parsed.stream, parsed.max_output_tokens) == ("m", True, 7)
    assert ParserPlugin(VLLM_HTTP_TYPE).claims == (("inference/v1/generate", ApiKind.GENERATE),)


@pytest.mark.parametrize(
    ("api", "body", "cap"),
    [
        (ApiKind.CHAT_COMPLETIONS, {"max_completion_tokens": 5, "max_tokens": 9}, 5),
        (ApiKind.CHAT_COMPLETIONS, {"max_tokens": 9}, 9),
        (ApiKind.COMPLETIONS, {"max_tokens": True}, None),
        (ApiKind.RESPONSES, {"max_output_tokens": 11}, 11),
        (ApiKind.EMBEDDINGS, {"max_tokens": 3}, None),
    ],
)
def test_output_cap_per_api(api: ApiKind, body: dict[str, object], cap: int | None) -> None:
    base = {"model": "m", "prompt": "p", "messages": [{"role": "user", "content": "x"}], "input": "i"}
    assert parse_request_body(orjson.dumps({**base, **body}), api).max_output_tokens == cap


def test_passthrough_body_is_not_decoded() -> None:
    parsed = parse_request_body(b"\x00not json at all", ApiKind.PASSTHROUGH)
    assert (parsed.body, parsed.model, parsed.stream) == ({}, "", False)
