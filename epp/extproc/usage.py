"""Token ``usage`` from model-server responses: whole JSON bodies, and SSE streams chunk by chunk.

Streams are never buffered for this: :class:`SseUsageScanner` keeps only the unfinished last line
of the previous chunk, and decodes only ``data:`` lines that mention ``"usage"`` with a value, so
an ordinary token chunk costs a substring search. Like upstream's ``openai-parser`` it reads every
``data:`` line on its own, wherever the chunk boundaries fall: several in one chunk, with or
without a blank line between them, ``data:`` with or without the space, and a stream whose last
line has no line end; lines may end in LF, CRLF or CR (the SSE spec allows all three). Field
names follow the upstream parser: the Responses and Conversations APIs say
``input_tokens``/``output_tokens``, the completions APIs ``prompt_tokens``/``completion_tokens``;
anything else may use either.

SGLang's ``/generate`` (upstream ``sglanghttp-parser``) reports usage in ``meta_info``
(``prompt_tokens``, ``completion_tokens``, ``cached_tokens``); a stream carries ``meta_info`` in
every event, and only the finishing one (``finish_reason`` not null) is decoded.

Anthropic Messages (upstream ``anthropic-parser``): a JSON ``message`` carries ``usage`` with
``input_tokens``, ``output_tokens`` and ``cache_read_input_tokens`` (the cached count); a stream
splits it, the prompt side in ``message_start`` (under ``message.usage``) and the output count in
each ``message_delta`` (top-level ``usage``, a running total), so the scanner merges them: a
delta keeps the prompt counts it does not repeat. Total is input + output, as upstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from epp.framework.response import Usage

__all__ = ["SseUsageScanner", "Usage", "usage_from_json", "usage_from_object"]

_USAGE_KEY = b'"usage"'
_META_KEY = b'"meta_info"'
_UNFINISHED = (b'"finish_reason":null', b'"finish_reason": null')
_NULL_USAGE = (b'"usage":null', b'"usage": null')
_COMPLETIONS_OBJECTS = frozenset({"chat.completion", "chat.completion.chunk", "text_completion"})
_CACHED_DETAILS = ("prompt_tokens_details", "prompt_token_details", "input_tokens_details")
_MESSAGE_START = "message_start"
_MESSAGE_DELTA = "message_delta"
_ANTHROPIC_TYPES = frozenset({"message", _MESSAGE_START, _MESSAGE_DELTA})
# A line longer than this without a newline is not an SSE event we can use; drop it, not memory.
_MAX_LINE = 4 * 1024 * 1024


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    return int(value)


def _from_anthropic(usage: Mapping[str, Any]) -> Usage:
    prompt, completion = _count(usage.get("input_tokens")), _count(usage.get("output_tokens"))
    return Usage(prompt, completion, _count(usage.get("cache_read_input_tokens")), prompt + completion)


def _from_usage(object_type: str, usage: Mapping[str, Any]) -> Usage:
    if object_type.startswith(("response", "conversation")):
        prompt, completion = usage.get("input_tokens"), usage.get("output_tokens")
    elif object_type in _COMPLETIONS_OBJECTS:
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    else:
        prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
        completion = usage.get("completion_tokens", usage.get("output_tokens"))
    cached = 0
    for key in _CACHED_DETAILS:
        details = usage.get(key)
        if isinstance(details, Mapping):
            cached = _count(details.get("cached_tokens"))
            break
    return Usage(_count(prompt), _count(completion), cached, _count(usage.get("total_tokens")))


def _from_meta_info(meta: Mapping[str, Any]) -> Usage | None:
    """SGLang's: a finished answer's ``meta_info``; None for an unfinished one or one without counts."""
    if meta.get("finish_reason") is None or ("prompt_tokens" not in meta and "completion_tokens" not in meta):
        return None
    prompt, completion = _count(meta.get("prompt_tokens")), _count(meta.get("completion_tokens"))
    return Usage(prompt, completion, _count(meta.get("cached_tokens")), prompt + completion)


def usage_from_object(obj: Any) -> Usage | None:
    """Usage of one decoded response object or SSE event; None when it carries none.

    A Responses API ``response.completed`` event carries it under ``response.usage``; an SGLang
    answer under ``meta_info``.
    """
    if not isinstance(obj, Mapping):
        return None
    usage = obj.get("usage")
    meta = obj.get("meta_info")
    if usage is None and isinstance(meta, Mapping):
        return _from_meta_info(meta)
    event_type = obj.get("type")
    if event_type in _ANTHROPIC_TYPES:
        if event_type == _MESSAGE_START:
            message = obj.get("message")
            usage = message.get("usage") if isinstance(message, Mapping) else None
        return _from_anthropic(usage) if isinstance(usage, Mapping) else None
    object_type = obj.get("object")
    if not isinstance(usage, Mapping) and obj.get("type") == "response.completed":
        response = obj.get("response")
        if isinstance(response, Mapping):
            usage, object_type = response.get("usage"), "response"
    if not isinstance(usage, Mapping):
        return None
    return _from_usage(object_type if isinstance(object_type, str) else "", usage)


def usage_from_json(body: bytes) -> Usage | None:
    """Usage of a complete JSON response body; None when absent or the body is not JSON."""
    if _USAGE_KEY not in body and _META_KEY not in body:
        return None  # Skip decoding bodies that cannot carry usage (errors, embeddings...).
    try:
        return usage_from_object(orjson.loads(body))
    except orjson.JSONDecodeError:
        return None


class SseUsageScanner:
    """Finds usage in an SSE stream fed chunk by chunk; the last usage event seen wins.

    The last one wins (not the first) because servers that report running totals, such as vLLM
    with ``continuous_usage_stats``, put the final count in the last event.
    """

    __slots__ = ("_tail", "usage")

    def __init__(self) -> None:
        self._tail = b""
        self.usage: Usage | None = None

    def feed(self, chunk: bytes) -> None:
        """Scan the complete lines in ``chunk``; keep the unfinished last line for the next call."""
        data = self._tail + chunk if self._tail else chunk
        cut = max(data.rfind(b"\n"), data.rfind(b"\r"))
        if cut < 0:
            self._tail = data if len(data) <= _MAX_LINE else b""
            return
        self._tail = data[cut + 1 :]
        if _USAGE_KEY in data or _META_KEY in data:
            self._scan(data[:cut])

    def finish(self) -> None:
        """Scan a final line that had no line end after it (the stream ended)."""
        tail, self._tail = self._tail, b""
        if _USAGE_KEY in tail or _META_KEY in tail:
            self._scan(tail)

    def _scan(self, lines: bytes) -> None:
        for line in lines.splitlines():
            if not line.startswith(b"data:"):
                continue
            if _USAGE_KEY in line:
                payload = line[5:].strip()
                nulls = payload.count(_NULL_USAGE[0]) + payload.count(_NULL_USAGE[1])
                if nulls and nulls == payload.count(_USAGE_KEY):
                    continue  # Every "usage" in it is null (a token chunk): not worth decoding.
            elif _META_KEY in line and not any(unfinished in line for unfinished in _UNFINISHED):
                payload = line[5:].strip()  # SGLang's finishing event
            else:
                continue
            try:
                event = orjson.loads(payload)
            except ValueError:
                continue
            usage = usage_from_object(event)
            if usage is None:
                continue
            previous = self.usage
            if previous is not None and event.get("type") == _MESSAGE_DELTA:
                usage = _merge_delta(previous, usage)
            self.usage = usage


def _merge_delta(start: Usage, delta: Usage) -> Usage:
    """An Anthropic ``message_delta`` over what ``message_start`` said: its zeros keep the earlier counts."""
    prompt = delta.prompt_tokens or start.prompt_tokens
    completion = delta.completion_tokens or start.completion_tokens
    return Usage(prompt, completion, delta.cached_tokens or start.cached_tokens, prompt + completion)
