"""What a finished generation answers: its output text, its ``usage``, its JSON body in vLLM 0.32's fields.

The output is a deterministic word sequence from the request's seed (:func:`token_text`, shared
by the OpenAI and Anthropic answers and the streams); the bodies carry every field vLLM 0.32
writes (``service_tier``, ``system_fingerprint``, ``kv_transfer_params``, ... null where the
simulator has nothing to say), which the real-engine tier compares with a real server's.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from .sequence import RequestHandle

__all__ = ["FINGERPRINT", "full_response", "token_text", "usage"]

_VOCAB = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " was", " with", " be", " by",
    " on", " not", " he", " this", " are", " or", " his", " from", " at", " which", " but", " have", " an",
    " they", " you", " were", " her", " she", " there", " been", " one", " all", " we", " their", " has",
    " would", " when", " if", " so", " no", " what", " can", " out", " up", " into", " more", " time",
    " model", " token", " cache", " queue", " batch", " prefix", " adapter", " block", " request", " server",
    " latency", " stream", " engine", " pod", " gateway", " route", " score", " pick", " load",
)  # fmt: skip

#: what vLLM puts in ``system_fingerprint`` is its version and a config hash; the simulator says what it is
FINGERPRINT = "epp-sim"
_MESSAGE_NULLS = {"refusal": None, "annotations": None, "audio": None, "function_call": None, "reasoning": None}


def token_text(seed: int, choice: int, index: int) -> str:
    """The text of output token ``index`` of choice ``choice`` for a request with ``seed``."""
    return _VOCAB[(seed + choice * 1_000_003 + index * 2_654_435_761) % len(_VOCAB)]


def usage(handle: RequestHandle, n: int, *, details: bool, streamed: bool = False) -> dict[str, Any]:
    """vLLM's usage: prompt_tokens_details only with ``details`` (vLLM's ``--enable-prompt-tokens-details``);
    a stream's usage chunk omits the null details, as vLLM's does."""
    completion = handle.completion_tokens * n
    out: dict[str, Any] = {
        "prompt_tokens": handle.prompt_tokens,
        "total_tokens": handle.prompt_tokens + completion,
        "completion_tokens": completion,
    }
    cached = {"cached_tokens": handle.cached_tokens} if details else None
    if not streamed:
        out["prompt_tokens_details"] = cached
        out["completion_tokens_details"] = None
    elif cached is not None:
        out["prompt_tokens_details"] = cached
    return out


def full_response(handle: RequestHandle, model: str, n: int, *, chat: bool, details: bool) -> dict[str, Any]:
    """A non-streamed completion in vLLM 0.32's field set."""
    body: dict[str, Any] = {
        "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16],
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": _choices(handle, n, chat=chat),
        "service_tier": None,
        "system_fingerprint": FINGERPRINT,
        "usage": usage(handle, n, details=details),
    }
    if chat:
        body.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
    body.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
    return body


def _choices(handle: RequestHandle, n: int, *, chat: bool) -> list[dict[str, Any]]:
    count = handle.completion_tokens
    texts = ["".join(token_text(handle.seed, c, i) for i in range(count)) for c in range(n)]
    if chat:
        return [
            {
                "index": c,
                "message": {"role": "assistant", "content": text, **_MESSAGE_NULLS},
                "logprobs": None,
                "finish_reason": handle.finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
            }
            for c, text in enumerate(texts)
        ]
    return [
        {
            "index": c,
            "text": text,
            "logprobs": None,
            "finish_reason": handle.finish_reason,
            "stop_reason": None,
            "token_ids": None,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "routed_experts": None,
        }
        for c, text in enumerate(texts)
    ]
