"""vLLM's tokenization endpoints: render (what llm-d's token-producer calls), tokenize and detokenize.

- ``POST /v1/completions/render`` → ``[{...}]`` and ``POST /v1/chat/completions/render`` → ``{...}``:
  the request as the engine would run it, with its ``token_ids`` (chat through the template),
  in vLLM 0.32's field set (``request_id``, ``token_ids``, ``sampling_params``, ``model``, ...).
- ``POST /tokenize`` (``prompt`` or ``messages``) → ``{count, max_model_len, tokens, token_strs}``.
- ``POST /detokenize`` (``tokens``) → ``{prompt}``, with a real tokenizer only.

The ids are the ones the simulator computes with and announces in its KV events: the
``--tokenizer``'s when it has one, else its default tokenization (one id per 4 characters,
:func:`~epp_sim.modelserver.prefix_cache.char_token_ids`). So llm-d's precise configuration
(token-producer's vllm backend pointing at a pod) works against it out of the box. Unlike vLLM
0.32, render needs no ``--enable-scale-out`` (docs/simulator.md lists the difference).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any, Protocol

from aiohttp import web

from .openai_errors import OpenAIError, json_response, parse_body, require_json
from .prefix_cache import char_token_ids
from .sequence import prompt_too_long
from .tokenizer import SimTokenizer

__all__ = ["TokenizeEndpoints"]

# What vLLM 0.32 reports as a request's sampling parameters when the body sets none.
_SAMPLING_DEFAULTS: dict[str, Any] = {
    "presence_penalty": 0.0,
    "frequency_penalty": 0.0,
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "min_p": 0.0,
    "stop": [],
    "stop_token_ids": [],
    "output_kind": 2,
    "skip_clone": True,
    "bad_words": [],
    "skip_reading_prefix_cache": False,
}


class PromptSource(Protocol):
    """What the endpoints need of the server: the model check and the prompt as generation reads it."""

    @property
    def tokenizer(self) -> SimTokenizer | None: ...

    @property
    def max_model_len(self) -> int: ...

    def served_model(self, body: Mapping[str, Any]) -> tuple[str, str | None]: ...

    def prompt_of(self, body: Mapping[str, Any], *, chat: bool, truncate: bool = True) -> str | list[int]: ...


class TokenizeEndpoints:
    def __init__(self, server: PromptSource) -> None:
        self._server = server

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/v1/completions/render", self._render_completion)
        app.router.add_post("/v1/chat/completions/render", self._render_chat)
        app.router.add_post("/tokenize", self._tokenize)
        app.router.add_post("/detokenize", self._detokenize)

    def token_ids(self, body: Mapping[str, Any], *, chat: bool, whole: bool = False) -> tuple[str, list[int]]:
        """(the model, the prompt's ids) as generation would compute them; ``whole``: none cut at the context."""
        model, _ = self._server.served_model(body)
        prompt = self._server.prompt_of(body, chat=chat, truncate=not whole)
        ids = char_token_ids(prompt) if isinstance(prompt, str) else list(prompt)
        return model, ids if whole else ids[: self._server.max_model_len + 1]

    async def _render_completion(self, request: web.Request) -> web.Response:
        return await _answer(request, lambda body: [self._rendered(body, chat=False)])

    async def _render_chat(self, request: web.Request) -> web.Response:
        return await _answer(request, lambda body: self._rendered(body, chat=True))

    def _rendered(self, body: Mapping[str, Any], *, chat: bool) -> dict[str, Any]:
        model, ids = self.token_ids(body, chat=chat)
        limit = self._server.max_model_len
        if len(ids) > limit:  # render refuses what generation would refuse
            error = prompt_too_long(len(ids), limit)
            raise OpenAIError(400, str(error), param=error.param)
        sampling = dict(_SAMPLING_DEFAULTS)
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        if isinstance(max_tokens, int):
            sampling["max_tokens"] = max_tokens
        elif chat:
            sampling["max_tokens"] = self._server.max_model_len - len(ids)
        return {
            "request_id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16],
            "token_ids": ids,
            "token_offsets": None,
            "features": None,
            "content_parts": None,
            "sampling_params": sampling,
            "model": model,
            "reasoning_ended": None,
            "reasoning_parser_kwargs": None,
            "return_token_ids": None,
            "output_mode": "tokens",
            "stream": bool(body.get("stream", False)),
            "stream_options": body.get("stream_options"),
            "cache_salt": body.get("cache_salt"),
            "priority": 0,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
        }

    async def _tokenize(self, request: web.Request) -> web.Response:
        def tokenized(body: Mapping[str, Any]) -> dict[str, Any]:
            _, ids = self.token_ids(body, chat="messages" in body, whole=True)
            return {"count": len(ids), "max_model_len": self._server.max_model_len, "tokens": ids, "token_strs": None}

        return await _answer(request, tokenized)

    async def _detokenize(self, request: web.Request) -> web.Response:
        def detokenized(body: Mapping[str, Any]) -> dict[str, Any]:
            self._server.served_model(body)
            tokens = body.get("tokens")
            if not isinstance(tokens, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in tokens):
                raise OpenAIError(400, "tokens must be a list of token ids", param="tokens")
            tokenizer = self._server.tokenizer
            if tokenizer is None:
                raise OpenAIError(
                    400,
                    "the simulator's default tokenization (4 characters a token) cannot be decoded; "
                    "start it with --tokenizer",
                    param="tokens",
                )
            return {"prompt": tokenizer.decode(tokens)}

        return await _answer(request, detokenized)


async def _answer(request: web.Request, build: Any) -> web.Response:
    try:
        require_json(request)
        return json_response(build(parse_body(await request.read())))
    except OpenAIError as exc:
        return exc.response()
