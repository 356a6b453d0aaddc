"""sglanghttp-parser: SGLang's /generate bodies as the llm-d router reads them (pre-tokenized prompts only,
upstream's 400s), and SGLang's usage (``meta_info``) read from whole answers and from streams."""

from __future__ import annotations

import json

import pytest

from epp.errors import EppError, ErrorCode
from epp.extproc.usage import SseUsageScanner, Usage, usage_from_json
from epp.framework.parsing import Parser, ParserTable
from epp.framework.prompt import TokenPrompt
from epp.framework.request import ApiKind, InferenceRequest
from epp.plugins.parsers import DEFAULT_PARSER_TYPES, SGLANG_HTTP_TYPE, parser_of_type


def _parser() -> Parser:
    parser = parser_of_type(SGLANG_HTTP_TYPE)
    assert isinstance(parser, Parser)
    return parser


def test_it_claims_generate_and_reads_ids_cap_stream_and_salt() -> None:
    parser = _parser()
    assert parser.claims == (("generate", ApiKind.SGLANG_GENERATE),)
    # Listed with the defaults, /generate is its own; vLLM's inference/v1/generate stays vLLM's (longer suffix).
    table = ParserTable([*(parser_of_type(t) for t in DEFAULT_PARSER_TYPES[:3]), parser])  # type: ignore[misc]
    assert table.resolve("/generate")[0] is parser
    assert table.resolve("/inference/v1/generate")[1] is ApiKind.GENERATE
    raw = b'{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":8},"stream":true,"extra_key":"tenant"}'
    parsed = parser.parse(raw, ApiKind.SGLANG_GENERATE)
    assert (parsed.model, parsed.stream, parsed.max_output_tokens) == ("", True, 8)
    assert isinstance(parsed.prompt, TokenPrompt) and list(parsed.prompt.token_ids) == [1, 2, 3]
    request = InferenceRequest("r")
    parsed.apply_to(request, len(raw))
    assert request.cache_salt == "tenant"  # SGLang's extra_key isolates the prefix cache, as cache_salt
    assert parser.with_model(parsed, "other") is None  # no model in the body to rewrite


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"text":"hello"}', "invalid generate request: input_ids must be provided"),
        (b'{"input_ids":[]}', "invalid generate request: input_ids cannot be empty"),
        (b'{"input_ids":[[1,2],[3]]}', "input_ids must be an array of uint32 integers"),
        (b'{"input_ids":[1,-2]}', "input_ids must be an array of uint32 integers"),
        (b'{"input_ids":[1,4294967296]}', "input_ids must be an array of uint32 integers"),
        (b'{"input_ids":[1],"extra_key":7}', "unsupported generate request: extra_key must be a string"),
        (b'{"input_ids":[1],"stream":"yes"}', "invalid generate request: stream must be a boolean"),
        (b'{"input_ids":[1]', "error unmarshaling request bodyMap"),
    ],
)
def test_other_prompt_forms_and_bad_fields_are_400s(raw: bytes, message: str) -> None:
    with pytest.raises(EppError) as err:
        _parser().parse(raw, ApiKind.SGLANG_GENERATE)
    assert err.value.code is ErrorCode.BAD_REQUEST and message in str(err.value)


def _meta(finish: object, prompt: int = 5, completion: int = 3) -> dict[str, object]:
    meta: dict[str, object] = {"id": "x", "finish_reason": finish, "prompt_tokens": prompt}
    return {**meta, "completion_tokens": completion, "cached_tokens": 2}


def test_usage_is_meta_info_of_the_answer_and_of_the_finishing_event() -> None:
    answer = json.dumps({"text": "abc", "meta_info": _meta({"type": "length", "length": 3})}).encode()
    assert usage_from_json(answer) == Usage(5, 3, 2, 8)
    unfinished = json.dumps({"text": "a", "meta_info": _meta(None)}).encode()
    assert usage_from_json(unfinished) is None
    events = [{"text": "a" * i, "meta_info": _meta(None, completion=i)} for i in (1, 2)]
    events.append({"text": "abc", "meta_info": _meta({"type": "stop"}, completion=3)})
    stream = b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    for cut in range(len(stream)):  # however the stream is chunked
        scanner = SseUsageScanner()
        scanner.feed(stream[:cut])
        scanner.feed(stream[cut:])
        scanner.finish()
        assert scanner.usage == Usage(5, 3, 2, 8), cut
