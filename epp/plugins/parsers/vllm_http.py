"""``vllmhttp-parser``: vLLM's ``inference/v1/generate`` (token ids in, OpenAI-shaped usage out).

``token_ids`` must be a non-empty list; ``model`` may be absent; the output cap is
``sampling_params.max_tokens``.
"""

from __future__ import annotations

from epp.framework.parsing import ParsedBody
from epp.framework.prompt import TokenPrompt
from epp.framework.request import ApiKind
from epp.plugins.parsers._base import JsonBodyParser
from epp.plugins.parsers._json import bad_request, decode_object, non_empty_list, output_cap

__all__ = ["TYPE", "VllmHttpParser"]

TYPE = "vllmhttp-parser"


class VllmHttpParser(JsonBodyParser):
    __slots__ = ()
    plugin_type = TYPE
    _claims = (("inference/v1/generate", ApiKind.GENERATE),)

    def parse(self, raw: bytes, api: ApiKind) -> ParsedBody:
        body = decode_object(raw)
        token_ids = body.get("token_ids")
        if not non_empty_list(token_ids):
            raise bad_request("invalid generate request: must have non-empty token_ids field")
        model = body.get("model")
        return ParsedBody(
            body=body,
            model=model if isinstance(model, str) else "",
            api=api,
            stream=body.get("stream") is True,
            max_output_tokens=output_cap(body.get("sampling_params"), ("max_tokens",)),
            prompt=TokenPrompt(token_ids),
        )
