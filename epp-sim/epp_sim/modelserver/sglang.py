"""SGLang's native ``/generate`` on the simulator: what an SGLang server answers to a pre-tokenized prompt.

The picker's ``sglanghttp-parser`` routes these requests, so the simulator serves them as SGLang
does: ``input_ids`` (a list of token ids) or ``text``, ``sampling_params.max_new_tokens``,
``stream``. The answer is ``{"text", "output_ids", "meta_info"}``, ``meta_info`` carrying the id,
``finish_reason`` (``{"type": "length", "length": N}`` or ``{"type": "stop", ...}``),
``prompt_tokens``, ``completion_tokens`` and ``cached_tokens``; a stream sends one such object per
step (cumulative text, ``finish_reason`` null until the last) and ``data: [DONE]``. SGLang's errors
are ``{"error": {"message": ...}}`` with the status; a body it cannot read is a 400.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from .engine import GenerationRequest, InvalidRequestError, RequestHandle

__all__ = ["GenerateError", "GenerateRequest", "error_response", "generate_body", "parse_generate", "stream_generate"]

TokenText = Callable[[int, int, int], str]


class GenerateError(Exception):
    """A ``/generate`` body the simulator refuses (400)."""


@dataclass(frozen=True, slots=True)
class GenerateRequest:
    model: str
    req: GenerationRequest


def error_response(exc: Exception) -> web.Response:
    """400 for a request SGLang refuses, 503 when the engine is stopping."""
    status = 400 if isinstance(exc, GenerateError | InvalidRequestError) else 503
    body = {"error": {"message": str(exc)}}
    return web.Response(status=status, text=json.dumps(body), content_type="application/json")


def parse_generate(raw: bytes, model: str) -> GenerateRequest:
    try:
        body = json.loads(raw)
    except ValueError as exc:
        raise GenerateError(f"invalid JSON body: {exc}") from exc
    if not isinstance(body, Mapping):
        raise GenerateError("the body must be a JSON object")
    ids, text = body.get("input_ids"), body.get("text")
    if ids is not None:
        if not isinstance(ids, list) or not ids or not all(isinstance(t, int) for t in ids):
            raise GenerateError("input_ids must be a non-empty list of token ids")
        prompt: str | list[int] = ids
    elif isinstance(text, str) and text:
        prompt = text
    else:
        raise GenerateError("either text or input_ids should be provided")
    params = body.get("sampling_params") or {}
    if not isinstance(params, Mapping):
        raise GenerateError("sampling_params must be an object")
    max_new = params.get("max_new_tokens")
    if max_new is not None and (not isinstance(max_new, int) or max_new < 0):
        raise GenerateError(f"max_new_tokens must be a non-negative integer, got {max_new!r}")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise GenerateError(f"stream must be a boolean, got {stream!r}")
    return GenerateRequest(model, GenerationRequest(prompt=prompt, max_tokens=max_new or None, stream=stream))


def _meta(handle: RequestHandle, rid: str, *, finished: bool) -> dict[str, Any]:
    finish: dict[str, Any] | None = None
    if finished:
        reason = handle.finish_reason or "stop"
        finish = {"type": reason, "length": handle.completion_tokens} if reason == "length" else {"type": reason}
    return {
        "id": rid,
        "finish_reason": finish,
        "prompt_tokens": handle.prompt_tokens,
        "completion_tokens": handle.completion_tokens,
        "cached_tokens": handle.cached_tokens,
    }


def _text(handle: RequestHandle, token_text: TokenText, count: int) -> str:
    return "".join(token_text(handle.seed, 0, i) for i in range(count))


def generate_body(handle: RequestHandle, token_text: TokenText) -> dict[str, Any]:
    count = handle.completion_tokens
    return {
        "text": _text(handle, token_text, count),
        "output_ids": list(range(count)),
        "meta_info": _meta(handle, uuid.uuid4().hex, finished=True),
    }


async def stream_generate(request: web.Request, handle: RequestHandle, token_text: TokenText) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await resp.prepare(request)
    rid = uuid.uuid4().hex
    sent, finished = 0, False

    async def event() -> None:
        body = {
            "text": _text(handle, token_text, sent),
            "output_ids": list(range(sent)),
            "meta_info": _meta(handle, rid, finished=finished),
        }
        await resp.write(f"data: {json.dumps(body)}\n\n".encode())

    async for count in handle.tokens():
        sent += count
        finished = handle.done
        await event()
    if not finished:  # the last tokens came before the request was marked finished
        finished = True
        await event()
    await resp.write(b"data: [DONE]\n\n")
    await resp.write_eof()
    return resp
