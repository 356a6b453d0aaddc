"""Anthropic's Messages API on the simulator, as vLLM serves it: ``/v1/messages``, streaming and not.

vLLM answers ``POST /v1/messages`` with Anthropic's shapes, so agentic clients can talk to a
self-hosted model; the picker parses and routes these requests (``anthropic-parser``), so the
simulator serves them too. The request's ``system`` and ``messages`` are rendered into one prompt
the way ``/v1/chat/completions`` renders its messages (so prefixes line up across turns);
``max_tokens`` is required, as in Anthropic's API. The answer is a ``message`` object with
``usage`` (``input_tokens``, ``output_tokens``, ``cache_read_input_tokens``), or, with
``stream: true``, the event sequence ``message_start`` (input usage) → ``content_block_start`` →
``content_block_delta``… → ``content_block_stop`` → ``message_delta`` (output usage) →
``message_stop``. Errors use Anthropic's ``{"type": "error", "error": {...}}`` shape.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .engine import EngineStoppedError, GenerationRequest, RequestHandle

__all__ = ["MessagesError", "MessagesRequest", "error_response", "message_body", "parse_messages", "stream_message"]

_STOP_REASONS = {"length": "max_tokens", "stop": "end_turn"}
TokenText = Callable[[int, int, int], str]


class MessagesError(Exception):
    """A request the simulator refuses, with Anthropic's error type."""

    def __init__(self, status: int, message: str, err_type: str = "invalid_request_error") -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type


@dataclass(frozen=True, slots=True)
class MessagesRequest:
    model: str
    req: GenerationRequest


def error_response(status: int, message: str, err_type: str) -> web.Response:
    body = {"type": "error", "error": {"type": err_type, "message": message}}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def _text(content: object, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            str(block.get("text", "")) if isinstance(block, dict) and block.get("type") == "text" else "<|block|>"
            for block in content
        )
    raise MessagesError(400, f"{where}: must be a string or a list of content blocks")


def _prompt(body: Mapping[str, Any]) -> str:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise MessagesError(400, "messages: must be a non-empty list")
    parts: list[str] = []
    system = body.get("system")
    if system is not None:
        parts.append(f"<|system|>\n{_text(system, 'system')}\n")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise MessagesError(400, f"messages.{i}.role: must be 'user' or 'assistant'")
        parts.append(f"<|{message['role']}|>\n{_text(message.get('content'), f'messages.{i}.content')}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def parse_messages(raw: bytes, base_model: str, adapters: Mapping[str, str]) -> MessagesRequest:
    """The generation request of a ``/v1/messages`` body; :class:`MessagesError` names the bad field."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MessagesError(400, f"invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise MessagesError(400, "request body must be a JSON object")
    model = body.get("model")
    if not isinstance(model, str):
        raise MessagesError(400, "model: Field required")
    if model != base_model and model not in adapters:
        raise MessagesError(404, f"model: {model}", "not_found_error")
    max_tokens = body.get("max_tokens")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise MessagesError(400, f"max_tokens: must be an integer >= 1, got {max_tokens!r}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise MessagesError(400, f"stream: must be a boolean, got {stream!r}")
    req = GenerationRequest(
        prompt=_prompt(body),
        adapter=None if model == base_model else model,
        max_tokens=max_tokens,
        stream=stream,
    )
    return MessagesRequest(model=model, req=req)


def _usage(handle: RequestHandle) -> dict[str, int]:
    return {
        "input_tokens": handle.prompt_tokens,
        "cache_read_input_tokens": handle.cached_tokens,
        "output_tokens": handle.completion_tokens,
    }


def message_body(handle: RequestHandle, model: str, token_text: TokenText) -> dict[str, Any]:
    """The non-streaming answer: one ``message`` with its text and usage."""
    text = "".join(token_text(handle.seed, 0, i) for i in range(handle.completion_tokens))
    return {
        "id": "msg_" + uuid.uuid4().hex,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{"type": "text", "text": text}],
        "stop_reason": _STOP_REASONS.get(handle.finish_reason or "", "end_turn"),
        "stop_sequence": None,
        "usage": _usage(handle),
    }


def _event(name: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


async def stream_message(
    request: web.Request, handle: RequestHandle, model: str, token_text: TokenText
) -> web.StreamResponse:
    """The streaming answer: Anthropic's event sequence, one delta per engine step."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    start: dict[str, Any] = {
        "id": "msg_" + uuid.uuid4().hex,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": handle.prompt_tokens, "cache_read_input_tokens": 0, "output_tokens": 0},
    }
    await resp.write(_event("message_start", {"type": "message_start", "message": start}))
    block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    await resp.write(_event("content_block_start", block))
    sent = 0
    try:
        async for count in handle.tokens():
            text = "".join(token_text(handle.seed, 0, i) for i in range(sent, sent + count))
            sent += count
            delta = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}
            await resp.write(_event("content_block_delta", delta))
    except EngineStoppedError as exc:
        error = {"type": "error", "error": {"type": "overloaded_error", "message": str(exc)}}
        await resp.write(_event("error", error))
    else:
        await resp.write(_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        stop = _STOP_REASONS.get(handle.finish_reason or "", "end_turn")
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": handle.completion_tokens},
        }
        await resp.write(_event("message_delta", delta))
        await resp.write(_event("message_stop", {"type": "message_stop"}))
    await resp.write_eof()
    return resp
