"""Prompts out of OpenAI request bodies: a completion's ``prompt`` and a chat's ``messages``, validated.

Shared by generation and by the render and tokenize endpoints, so both see the same prompt. Chat
messages without a tokenizer are rendered as ``<|role|>\ncontent\n`` turns and a final
``<|assistant|>\n``, the way a chat template would, so multi-turn conversations share prefixes.
"""

from __future__ import annotations

from .openai_errors import OpenAIError

__all__ = ["chat_prompt", "completion_prompt"]

_NO_PROMPT = "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)"


def completion_prompt(prompt: object) -> str | list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if prompt is None or prompt == "" or prompt == []:
        raise OpenAIError(400, _NO_PROMPT, param="prompt")
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str | list) for p in prompt):
        raise OpenAIError(400, "batched prompts (a list of several prompts) are not supported", param="prompt")
    raise OpenAIError(
        400, "prompt must be a string, a list of token ids, or a one-element list of either", param="prompt"
    )


def chat_prompt(messages: object) -> str:
    """Render messages the way a chat template would, so prefixes line up across turns."""
    if messages is None:
        raise OpenAIError(400, "messages is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise OpenAIError(400, "messages must be a non-empty list", param="messages")
    parts: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise OpenAIError(400, f"messages[{i}] must be an object with a string role", param="messages")
        content = msg.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "") if isinstance(p, dict) and p.get("type") == "text" else "<|media|>" for p in content
            )
        elif content is not None and not isinstance(content, str):
            raise OpenAIError(400, f"messages[{i}].content must be a string or a list of parts", param="messages")
        parts.append(f"<|{msg['role']}|>\n{content or ''}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)
