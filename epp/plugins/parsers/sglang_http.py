"""``sglanghttp-parser``: SGLang's native ``/generate`` (token ids in, ``meta_info`` usage out), as upstream reads it.

Upstream's parser takes pre-tokenized prompts only: ``input_ids`` must be a non-empty flat list of
uint32 token ids (SGLang's other prompt forms, ``text``, a batch of id lists or ``input_embeds``,
are refused with upstream's 400s: "input_ids must be provided", "input_ids must be an array of
uint32 integers"); ``extra_key``, when present, must be a string and isolates the request's prefix
cache as vLLM's ``cache_salt`` does; the output cap is ``sampling_params.max_new_tokens``;
``stream`` a boolean. The body names no model (the pool serves one), so there is nothing to
rewrite. The response's token usage is SGLang's ``meta_info`` (``prompt_tokens``,
``completion_tokens``, ``cached_tokens``) of the JSON answer or of the stream's finishing event,
which the response relay reads (``extproc.usage``).
"""

from __future__ import annotations

from typing import Any

from epp.framework.parsing import ParsedBody
from epp.framework.prompt import TokenPrompt
from epp.framework.request import ApiKind
from epp.plugins.parsers._base import JsonBodyParser
from epp.plugins.parsers._json import bad_request, decode_object, output_cap

__all__ = ["TYPE", "SglangHttpParser"]

TYPE = "sglanghttp-parser"
_UINT32 = 1 << 32


def _token_ids(value: Any) -> list[int]:
    if value is None:
        raise bad_request("invalid generate request: input_ids must be provided")
    if not isinstance(value, list) or not all(
        isinstance(t, int) and not isinstance(t, bool) and 0 <= t < _UINT32 for t in value
    ):
        raise bad_request("invalid generate request: input_ids must be an array of uint32 integers")
    if not value:
        raise bad_request("invalid generate request: input_ids cannot be empty")
    return value


class SglangHttpParser(JsonBodyParser):
    __slots__ = ()
    plugin_type = TYPE
    _claims = (("generate", ApiKind.SGLANG_GENERATE),)

    def parse(self, raw: bytes, api: ApiKind) -> ParsedBody:
        body = decode_object(raw)
        ids = _token_ids(body.get("input_ids"))
        salt = body.get("extra_key")
        if salt is not None and not isinstance(salt, str):
            raise bad_request("unsupported generate request: extra_key must be a string")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise bad_request("invalid generate request: stream must be a boolean")
        return ParsedBody(
            body=body,
            model="",
            api=api,
            stream=stream,
            max_output_tokens=output_cap(body.get("sampling_params"), ("max_new_tokens",)),
            prompt=TokenPrompt(ids),
        )

    def with_model(self, parsed: ParsedBody, model: str) -> bytes | None:
        return None  # SGLang's generate names no model
