"""Request parsers: path → API by the configured parsers, and each API's bodies (good and malformed)."""

from __future__ import annotations

import orjson
import pytest

from epp.errors import EppError, ErrorCode
from epp.extproc.request_body import parse_request_body
from epp.framework.parsing import ParserTable, request_path
from epp.framework.request import ApiKind
from epp.plugins.parsers import (
    ANTHROPIC_TYPE,
    DEFAULT_PARSER_TYPES,
    OPENAI_TYPE,
    PASSTHROUGH_TYPE,
    VLLM_HTTP_TYPE,
    ParserPlugin,
)

DEFAULT = ParserTable(ParserPlugin(t) for t in DEFAULT_PARSER_TYPES)


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
    assert DEFAULT.resolve(path) is api


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
    assert table.resolve("/v1/messages") is ApiKind.PASSTHROUGH


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
