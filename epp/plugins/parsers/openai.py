"""``openai-parser``: OpenAI's completions, chat completions, responses, conversations, embeddings, image
generation and vLLM's two ``/render`` paths, validated as the llm-d router's OpenAI parser does.

Checks run in upstream's order: JSON, then the API's required field, then ``model`` (required by
every OpenAI API). Each API's prompt is what prefix matching reads: chat turns, the completion text
(or the token ids a completion may carry), the JSON of a Responses input (after its instructions),
of a conversation's items or of an embeddings input; an image prompt is not matched.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epp.framework.parsing import ParsedBody
from epp.framework.prompt import EMPTY_PROMPT, ChatPrompt, JsonPrompt, Prompt, TextPrompt, TokenPrompt
from epp.framework.request import ApiKind
from epp.plugins.parsers._base import JsonBodyParser
from epp.plugins.parsers._json import bad_request, decode_object, non_empty_list, output_cap

__all__ = ["TYPE", "OpenAIParser"]

TYPE = "openai-parser"

# Where each API keeps the client's output cap, first spelling first (upstream's per-API fields).
_OUTPUT_CAP: Mapping[ApiKind, tuple[str, ...]] = {
    ApiKind.CHAT_COMPLETIONS: ("max_completion_tokens", "max_tokens"),
    ApiKind.COMPLETIONS: ("max_tokens",),
    ApiKind.RESPONSES: ("max_output_tokens",),
}


def _completion_prompt(prompt: Any) -> Prompt:
    if isinstance(prompt, str):
        return TextPrompt((prompt,))
    if all(isinstance(p, str) for p in prompt):
        return TextPrompt(tuple(prompt))
    return TokenPrompt(prompt)  # token ids, or nested lists of them


def _prompt(body: Mapping[str, Any], api: ApiKind) -> Prompt:
    """The API's prompt; raises the upstream 400 when its required field is missing."""
    if api is ApiKind.CHAT_COMPLETIONS:
        messages = body.get("messages")
        if not non_empty_list(messages):
            raise bad_request("invalid chat completions request: must have valid messages field")
        return ChatPrompt(messages)
    if api is ApiKind.COMPLETIONS:
        prompt = body.get("prompt")
        if not (isinstance(prompt, str | list) and len(prompt) > 0):
            raise bad_request("invalid completions request: must have prompt field")
        return _completion_prompt(prompt)
    if api is ApiKind.RESPONSES:
        if body.get("input") is None:
            raise bad_request("invalid responses request: must have input field")
        head = [{"instructions": body["instructions"]}] if "instructions" in body else []
        return JsonPrompt((*head, body["input"]))
    if api is ApiKind.CONVERSATIONS:
        if not non_empty_list(body.get("items")):
            raise bad_request("invalid conversations request: must have items field")
        return JsonPrompt((body["items"],))
    if api is ApiKind.EMBEDDINGS:
        if body.get("input") is None:
            raise bad_request("invalid embeddings request: must have input field")
        return JsonPrompt((body["input"],))
    prompt = body.get("prompt")  # images/generations
    if not isinstance(prompt, str) or not prompt:
        raise bad_request("invalid images generations request: must have prompt field")
    return EMPTY_PROMPT


class OpenAIParser(JsonBodyParser):
    __slots__ = ()
    plugin_type = TYPE
    _claims = (
        ("chat/completions", ApiKind.CHAT_COMPLETIONS),
        ("completions", ApiKind.COMPLETIONS),
        ("embeddings", ApiKind.EMBEDDINGS),
        ("responses", ApiKind.RESPONSES),
        ("conversations", ApiKind.CONVERSATIONS),
        ("chat/completions/render", ApiKind.CHAT_COMPLETIONS),
        ("completions/render", ApiKind.COMPLETIONS),
        ("images/generations", ApiKind.IMAGES_GENERATIONS),
    )

    def parse(self, raw: bytes, api: ApiKind) -> ParsedBody:
        body = decode_object(raw)
        prompt = _prompt(body, api)
        model = body.get("model")
        if not isinstance(model, str):
            raise bad_request("model not found in request body")
        return ParsedBody(
            body=body,
            model=model,
            api=api,
            stream=body.get("stream") is True,
            max_output_tokens=output_cap(body, _OUTPUT_CAP.get(api, ())),
            prompt=prompt,
        )
