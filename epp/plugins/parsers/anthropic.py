"""``anthropic-parser``: Anthropic's Messages API and ``messages/count_tokens``, as the llm-d router reads them.

``messages`` must be a non-empty list; as upstream, ``model`` may be absent. The prompt is the system
prompt (Anthropic keeps it apart from the turns) followed by the turns.
"""

from __future__ import annotations

from epp.framework.parsing import ParsedBody
from epp.framework.prompt import ChatPrompt
from epp.framework.request import ApiKind
from epp.plugins.parsers._base import JsonBodyParser
from epp.plugins.parsers._json import bad_request, decode_object, non_empty_list, output_cap

__all__ = ["TYPE", "AnthropicParser"]

TYPE = "anthropic-parser"


class AnthropicParser(JsonBodyParser):
    __slots__ = ()
    plugin_type = TYPE
    _claims = (("messages", ApiKind.MESSAGES), ("messages/count_tokens", ApiKind.COUNT_TOKENS))

    def parse(self, raw: bytes, api: ApiKind) -> ParsedBody:
        body = decode_object(raw)
        messages = body.get("messages")
        if not non_empty_list(messages):
            raise bad_request("invalid messages request: must have at least one message")
        model = body.get("model")
        return ParsedBody(
            body=body,
            model=model if isinstance(model, str) else "",
            api=api,
            stream=body.get("stream") is True,
            max_output_tokens=output_cap(body, ("max_tokens",)) if api is ApiKind.MESSAGES else None,
            prompt=ChatPrompt(messages, system=body.get("system")),
        )
