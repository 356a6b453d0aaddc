"""The simulator's HTTP face: vLLM's OpenAI-compatible API, ``/metrics``, and test admin endpoints.

``/v1/completions`` and ``/v1/chat/completions`` (JSON with ``usage``, or SSE chunks ending in
``data: [DONE]`` with a usage chunk when ``stream_options.include_usage``), ``/v1/models``,
``/v1/messages`` (Anthropic's Messages API, as vLLM serves it: ``anthropic.py``),
``/health``, ``/metrics``, vLLM's runtime adapter endpoints, and for tests ``/_sim/pin``
(POST/DELETE), ``/_sim/fail`` (POST ``{"status": 500}``: every completion is answered with that
status while ``/metrics`` keeps answering, as a vLLM whose engine died does; DELETE: serve again)
and ``/_sim/stats``. Errors use OpenAI's ``{"error": {...}}`` shape. Output text
is a deterministic word sequence derived from the request's seed (or its prompt).
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from aiohttp import web

from .anthropic import (
    MessagesError,
    MessagesRequest,
    error_response,
    message_body,
    parse_messages,
    stream_message,
)
from .config import Pins, PinsError
from .disagg import KvTransfer, cache_hit_threshold, kv_transfer, prefill_answer_params
from .engine import Engine, EngineStoppedError, GenerationRequest, InvalidRequestError, RequestHandle
from .exposition import CONTENT_TYPE
from .tokenizer import SimTokenizer, TokenizerError

__all__ = ["SimServer", "token_text"]

_VOCAB = (
    " the", " of", " and", " to", " in", " is", " that", " for", " it", " as", " was", " with", " be", " by",
    " on", " not", " he", " this", " are", " or", " his", " from", " at", " which", " but", " have", " an",
    " they", " you", " were", " her", " she", " there", " been", " one", " all", " we", " their", " has",
    " would", " when", " if", " so", " no", " what", " can", " out", " up", " into", " more", " time",
    " model", " token", " cache", " queue", " batch", " prefix", " adapter", " block", " request", " server",
    " latency", " stream", " engine", " pod", " gateway", " route", " score", " pick", " load",
)  # fmt: skip

#: requests the HTTP instrumentator counts (vLLM excludes /metrics, /health and friends)
_INSTRUMENTED = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/models"})


def _dumps(obj: object) -> str:
    """Compact JSON, as vLLM (pydantic) writes it."""
    return json.dumps(obj, separators=(",", ":"))


def _json(body: object, status: int = 200) -> web.Response:
    return web.json_response(body, status=status, dumps=_dumps)


def token_text(seed: int, choice: int, index: int) -> str:
    """The text of output token ``index`` of choice ``choice`` for a request with ``seed``."""
    return _VOCAB[(seed + choice * 1_000_003 + index * 2_654_435_761) % len(_VOCAB)]


class _BadRequestError(Exception):
    def __init__(self, status: int, message: str, *, err_type: str = "BadRequestError", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.err_type = err_type
        self.param = param


def _error(status: int, message: str, err_type: str, param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": err_type, "param": param, "code": status}}
    return _json(body, status)


@dataclass(slots=True)
class _Stats:
    requests: int = 0
    errors: int = 0
    by_model: Counter[str] = field(default_factory=Counter)
    last_model: str | None = None
    last_path: str | None = None
    last_headers: dict[str, str] = field(default_factory=dict)
    last_kv_transfer_params: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class _Parsed:
    model: str
    req: GenerationRequest
    include_usage: bool
    kv_transfer: KvTransfer | None = None


class _Submitted(Protocol):
    """What any API's parsed request gives the shared handler: the model asked for and the engine's request."""

    @property
    def model(self) -> str: ...

    @property
    def req(self) -> GenerationRequest: ...


_P = TypeVar("_P", bound=_Submitted)


@dataclass(frozen=True, slots=True)
class _Api:
    """How one API refuses a request: its parse error type, and the response for that, an engine
    refusal (400) or the engine stopping (503), each in the API's own error shape."""

    bad_request: type[Exception]
    refuse: Callable[[Exception], web.Response]


def _openai_refusal(exc: Exception) -> web.Response:
    if isinstance(exc, _BadRequestError):
        return _error(exc.status, exc.message, exc.err_type, exc.param)
    if isinstance(exc, EngineStoppedError):
        return _error(503, str(exc), "ServiceUnavailableError")
    return _error(400, str(exc), "BadRequestError")


def _anthropic_refusal(exc: Exception) -> web.Response:
    if isinstance(exc, MessagesError):
        return error_response(exc.status, exc.message, exc.err_type)
    if isinstance(exc, EngineStoppedError):
        return error_response(503, str(exc), "overloaded_error")
    return error_response(400, str(exc), "invalid_request_error")


_OPENAI = _Api(_BadRequestError, _openai_refusal)
_ANTHROPIC = _Api(MessagesError, _anthropic_refusal)


class SimServer:
    """Routes and handlers over one :class:`Engine`; build the aiohttp app with :meth:`make_app`."""

    def __init__(self, engine: Engine, tokenizer: SimTokenizer | None = None, *, address: str = "") -> None:
        """``address``: the server's ``host:port``, named in the KV-transfer parameters of its prefill answers."""
        self.engine = engine
        self.tokenizer = tokenizer
        self.address = address
        self._stats = _Stats()
        self._created = int(time.time())
        self.failing = 0  # the status every completion gets while set (/_sim/fail)

    def make_app(self) -> web.Application:
        app = web.Application(middlewares=[self._instrument], client_max_size=64 * 1024 * 1024)
        app.router.add_post("/v1/completions", self._completions)
        app.router.add_post("/v1/chat/completions", self._chat_completions)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_post("/v1/completions/render", self._render_completion)
        app.router.add_post("/v1/chat/completions/render", self._render_chat)
        app.router.add_post("/reset_prefix_cache", self._reset_prefix_cache)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/v1/load_lora_adapter", self._load_adapter)
        app.router.add_post("/v1/unload_lora_adapter", self._unload_adapter)
        app.router.add_get("/health", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/_sim/pin", self._pin)
        app.router.add_delete("/_sim/pin", self._unpin)
        app.router.add_post("/_sim/fail", self._fail)
        app.router.add_delete("/_sim/fail", self._recover)
        app.router.add_get("/_sim/stats", self._get_stats)
        return app

    def stats(self) -> dict[str, Any]:
        """Requests served (total and by model), the last request's model, path and headers, and
        the engine's counters (prefix hits, preemptions, queue, KV)."""
        s = self._stats
        return {
            "requests": s.requests,
            "errors": s.errors,
            "by_model": dict(s.by_model),
            "last_model": s.last_model,
            "last_path": s.last_path,
            "last_headers": dict(s.last_headers),
            "last_kv_transfer_params": s.last_kv_transfer_params,
            "pins": self.engine.pins.to_json(),
            **self.engine.stats(),
        }

    # -- middleware -----------------------------------------------------------------------------

    @web.middleware
    async def _instrument(
        self, request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if request.path not in _INSTRUMENTED:
            return await handler(request)
        start = self.engine.now()
        try:
            resp = await handler(request)
        except web.HTTPException as exc:
            self._observe_http(request, exc.status, 0, start)
            raise
        self._observe_http(request, resp.status, resp.body_length, start)
        return resp

    def _observe_http(self, request: web.Request, status: int, size: int, start: float) -> None:
        self.engine.metrics.http.observe(
            handler=request.path,
            method=request.method,
            status=status,
            duration=self.engine.now() - start,
            req_size=request.content_length or 0,
            resp_size=size,
            now_wall=time.time(),
        )

    # -- OpenAI endpoints -------------------------------------------------------------------------

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=False)

    async def _chat_completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, chat=True)

    async def _serve(self, request: web.Request, *, chat: bool) -> web.StreamResponse:
        async def reply(parsed: _Parsed, handle: RequestHandle) -> web.StreamResponse:
            self._stats.last_kv_transfer_params = dict(parsed.kv_transfer.params) if parsed.kv_transfer else None
            if parsed.req.stream:
                return await self._stream(request, handle, parsed, chat=chat)
            await handle.wait()
            answer = _full_response(handle, parsed, chat=chat, created=int(time.time()))
            if parsed.req.remote_decode:
                answer["kv_transfer_params"] = prefill_answer_params(self.address, handle.hashes)
            return _json(answer)

        return await self._generate(request, lambda raw: self._parse(raw, chat=chat), reply, _OPENAI)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        async def reply(parsed: MessagesRequest, handle: RequestHandle) -> web.StreamResponse:
            if parsed.req.stream:
                return await stream_message(request, handle, parsed.model, token_text)
            await handle.wait()
            return _json(message_body(handle, parsed.model, token_text))

        engine = self.engine
        return await self._generate(
            request, lambda raw: parse_messages(raw, engine.config.model, engine.adapters), reply, _ANTHROPIC
        )

    async def _generate(
        self,
        request: web.Request,
        parse: Callable[[bytes], _P],
        reply: Callable[[_P, RequestHandle], Awaitable[web.StreamResponse]],
        api: _Api,
    ) -> web.StreamResponse:
        """One generation request of any API: parse, submit, count, reply; ``api`` shapes the errors."""
        s = self._stats
        s.last_path = request.path
        s.last_headers = dict(request.headers)
        if self.failing:  # /_sim/fail: a model server answering 5xx while /metrics still works
            s.errors += 1
            return _error(self.failing, "simulated failure (/_sim/fail)", "InternalServerError")
        try:
            parsed = parse(await request.read())
            handle = self.engine.submit(parsed.req)
        except (api.bad_request, InvalidRequestError) as exc:
            s.errors += 1
            return api.refuse(exc)
        s.requests += 1
        s.by_model[parsed.model] += 1
        s.last_model = parsed.model
        try:
            return await reply(parsed, handle)
        except EngineStoppedError as exc:
            return api.refuse(exc)
        finally:
            handle.abort()  # no-op when finished; frees the KV when the client went away

    def _parse(self, raw: bytes, *, chat: bool) -> _Parsed:
        try:
            body = json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise _BadRequestError(400, f"invalid JSON body: {exc}") from exc
        if not isinstance(body, dict):
            raise _BadRequestError(400, f"request body must be a JSON object, got {type(body).__name__}")
        cfg = self.engine.config
        model = body.get("model", cfg.model)
        if not isinstance(model, str):
            raise _BadRequestError(400, f"model must be a string, got {model!r}", param="model")
        adapter: str | None = None
        if model != cfg.model:
            if model not in self.engine.adapters:
                raise _BadRequestError(
                    404, f"The model `{model}` does not exist.", err_type="NotFoundError", param="model"
                )
            adapter = model
        prompt = self._prompt(body, chat=chat)
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, dict):
            raise _BadRequestError(400, "stream_options must be an object", param="stream_options")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise _BadRequestError(400, f"stream must be a boolean, got {stream!r}", param="stream")
        try:
            transfer = kv_transfer(body)
            threshold = cache_hit_threshold(body)
        except ValueError as exc:
            raise _BadRequestError(400, str(exc), param="kv_transfer_params") from exc
        remote_decode = transfer is not None and transfer.remote_decode
        if remote_decode and stream:
            raise _BadRequestError(400, "Prefill does not support streaming", param="stream")
        req = GenerationRequest(
            prompt=prompt,
            adapter=adapter,
            max_tokens=_opt_int(body, "max_tokens", max_tokens),
            n=_opt_int(body, "n", body.get("n")) or 1,
            seed=_opt_int(body, "seed", body.get("seed"), minimum=None),
            stream=stream,
            remote_decode=remote_decode,
            remote_prefill=transfer is not None and transfer.remote_prefill,
            cache_hit_threshold=threshold,
        )
        return _Parsed(
            model=model, req=req, include_usage=bool(stream_options.get("include_usage")), kv_transfer=transfer
        )

    def _prompt(self, body: Mapping[str, Any], *, chat: bool) -> str | list[int]:
        """The prompt as the engine sees it: token ids when there is a tokenizer (chat via its template)."""
        tokenizer = self.tokenizer
        if chat:
            text = _chat_prompt(body.get("messages"))  # validates the messages
            if tokenizer is None:
                return text
            try:
                return tokenizer.render_chat(body["messages"])
            except TokenizerError as exc:
                raise _BadRequestError(400, str(exc), param="messages") from exc
        prompt = _completion_prompt(body.get("prompt"))
        return tokenizer.encode(prompt) if tokenizer is not None and isinstance(prompt, str) else prompt

    async def _render(self, request: web.Request, *, chat: bool) -> web.Response:
        """vLLM's render endpoints: the prompt's token ids, templated and tokenized as a request would be."""
        if self.tokenizer is None:
            return _error(400, "this simulator has no tokenizer (start it with --tokenizer)", "BadRequestError")
        try:
            body = json.loads(await request.read())
            if not isinstance(body, dict):
                raise _BadRequestError(400, "request body must be a JSON object")
            ids = self._prompt(body, chat=chat)
        except ValueError as exc:
            return _error(400, f"invalid JSON body: {exc}", "BadRequestError")
        except _BadRequestError as exc:
            return _error(exc.status, exc.message, exc.err_type, exc.param)
        rendered = {"token_ids": ids}
        return _json(rendered if chat else [rendered])

    async def _render_completion(self, request: web.Request) -> web.Response:
        return await self._render(request, chat=False)

    async def _render_chat(self, request: web.Request) -> web.Response:
        return await self._render(request, chat=True)

    async def _reset_prefix_cache(self, request: web.Request) -> web.Response:
        if not self.engine.reset_prefix_cache():
            return _error(400, "cannot reset the prefix cache while requests hold cached blocks", "BadRequestError")
        return web.Response(status=200)

    async def _stream(
        self, request: web.Request, handle: RequestHandle, parsed: _Parsed, *, chat: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await resp.prepare(request)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex
        created = int(time.time())
        head = _dumps({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion"})[:-1]
        head += f',"created":{created},"model":{_dumps(parsed.model)},"choices":['
        n = parsed.req.n
        if chat:
            role = ",".join(
                f'{{"index":{c},"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}'
                for c in range(n)
            )
            await resp.write(f"data: {head}{role}]}}\n\n".encode())
        sent = 0
        try:
            async for count in handle.tokens():
                finish = _dumps(handle.finish_reason) if handle.done else "null"
                chunks = []
                for c in range(n):
                    text = _dumps("".join(token_text(handle.seed, c, i) for i in range(sent, sent + count)))
                    if chat:
                        choice = (
                            f'{{"index":{c},"delta":{{"content":{text}}},"logprobs":null,"finish_reason":{finish}}}'
                        )
                    else:
                        choice = (
                            f'{{"index":{c},"text":{text},"logprobs":null,"finish_reason":{finish},"stop_reason":null}}'
                        )
                    chunks.append(f"data: {head}{choice}]}}\n\n")
                sent += count
                await resp.write("".join(chunks).encode())
        except EngineStoppedError as exc:
            err = {"error": {"message": str(exc), "type": "ServiceUnavailableError", "param": None, "code": 503}}
            await resp.write(f"data: {_dumps(err)}\n\n".encode())
        else:
            if parsed.include_usage:
                usage = _dumps(_usage(handle, n))
                await resp.write(f'data: {head}],"usage":{usage}}}\n\n'.encode())
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def _models(self, request: web.Request) -> web.Response:
        cfg = self.engine.config
        perm = [{"id": f"modelperm-{cfg.model}", "object": "model_permission", "created": self._created}]
        data: list[dict[str, Any]] = [
            {
                "id": cfg.model,
                "object": "model",
                "created": self._created,
                "owned_by": "vllm",
                "root": cfg.model,
                "parent": None,
                "max_model_len": cfg.max_model_len,
                "permission": perm,
            }
        ]
        data.extend(
            {
                "id": name,
                "object": "model",
                "created": self._created,
                "owned_by": "vllm",
                "root": path,
                "parent": cfg.model,
                "max_model_len": None,
                "permission": perm,
            }
            for name, path in self.engine.adapters.items()
        )
        return _json({"object": "list", "data": data})

    async def _load_adapter(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str):
            return _error(400, "Both 'lora_name' and 'lora_path' must be provided.", "BadRequestError")
        try:
            self.engine.add_adapter(name, path)
        except InvalidRequestError as exc:
            return _error(400, str(exc), "InvalidUserInput")
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload_adapter(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        name = body.get("lora_name")
        if not isinstance(name, str):
            return _error(400, "'lora_name' must be provided.", "BadRequestError")
        try:
            self.engine.remove_adapter(name)
        except InvalidRequestError as exc:
            return _error(404 if "cannot be found" in str(exc) else 400, str(exc), "NotFoundError")
        return web.Response(text=f"Success: LoRA adapter '{name}' removed successfully.")

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response()

    async def _metrics(self, request: web.Request) -> web.Response:
        return web.Response(body=self.engine.render_metrics(), headers={"Content-Type": CONTENT_TYPE})

    # -- admin ----------------------------------------------------------------------------------

    async def _pin(self, request: web.Request) -> web.Response:
        try:
            doc = json.loads(await request.read())
            self.engine.set_pins(self.engine.pins.updated(doc))
        except (ValueError, UnicodeDecodeError) as exc:  # PinsError is a ValueError
            kind = "invalid pin" if isinstance(exc, PinsError) else "invalid JSON body"
            return _error(400, f"{kind}: {exc}", "BadRequestError")
        return _json({"pins": self.engine.pins.to_json()})

    async def _unpin(self, request: web.Request) -> web.Response:
        self.engine.set_pins(Pins())
        return _json({"pins": {}})

    async def _fail(self, request: web.Request) -> web.Response:
        status = (await _json_object(request)).get("status", 500)
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            return _error(400, f"status must be an HTTP error status (400-599), got {status!r}", "BadRequestError")
        self.failing = status
        return _json({"failing": status})

    async def _recover(self, request: web.Request) -> web.Response:
        self.failing = 0
        return _json({"failing": 0})

    async def _get_stats(self, request: web.Request) -> web.Response:
        return _json(self.stats())


async def _json_object(request: web.Request) -> Mapping[str, Any]:
    try:
        body = json.loads(await request.read())
    except (ValueError, UnicodeDecodeError):
        return {}
    return body if isinstance(body, dict) else {}


def _opt_int(body: Mapping[str, Any], name: str, value: object, *, minimum: int | None = 1) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or (minimum is not None and value < minimum):
        bound = f" ≥ {minimum}" if minimum is not None else ""
        raise _BadRequestError(400, f"{name} must be an integer{bound}, got {value!r}", param=name)
    return value


def _completion_prompt(prompt: object) -> str | list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        if not prompt:
            raise _BadRequestError(400, "prompt must not be empty", param="prompt")
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        return prompt
    if prompt is None:
        raise _BadRequestError(400, "prompt is required", param="prompt")
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str | list) for p in prompt):
        raise _BadRequestError(400, "batched prompts (a list of several prompts) are not supported", param="prompt")
    raise _BadRequestError(
        400, "prompt must be a string, a list of token ids, or a one-element list of either", param="prompt"
    )


def _chat_prompt(messages: object) -> str:
    """Render messages the way a chat template would, so prefixes line up across turns."""
    if messages is None:
        raise _BadRequestError(400, "messages is required", param="messages")
    if not isinstance(messages, list) or not messages:
        raise _BadRequestError(400, "messages must be a non-empty list", param="messages")
    parts: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise _BadRequestError(400, f"messages[{i}] must be an object with a string role", param="messages")
        content = msg.get("content")
        if isinstance(content, list):
            content = "".join(
                p.get("text", "") if isinstance(p, dict) and p.get("type") == "text" else "<|media|>" for p in content
            )
        elif content is not None and not isinstance(content, str):
            raise _BadRequestError(400, f"messages[{i}].content must be a string or a list of parts", param="messages")
        parts.append(f"<|{msg['role']}|>\n{content or ''}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)


def _usage(handle: RequestHandle, n: int) -> dict[str, Any]:
    completion = handle.completion_tokens * n
    return {
        "prompt_tokens": handle.prompt_tokens,
        "total_tokens": handle.prompt_tokens + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": {"cached_tokens": handle.cached_tokens},
    }


def _full_response(handle: RequestHandle, parsed: _Parsed, *, chat: bool, created: int) -> dict[str, Any]:
    count = handle.completion_tokens
    texts = ["".join(token_text(handle.seed, c, i) for i in range(count)) for c in range(parsed.req.n)]
    if chat:
        choices: list[dict[str, Any]] = [
            {
                "index": c,
                "message": {"role": "assistant", "content": text, "tool_calls": []},
                "logprobs": None,
                "finish_reason": handle.finish_reason,
                "stop_reason": None,
            }
            for c, text in enumerate(texts)
        ]
    else:
        choices = [
            {"index": c, "text": text, "logprobs": None, "finish_reason": handle.finish_reason, "stop_reason": None}
            for c, text in enumerate(texts)
        ]
    return {
        "id": ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex,
        "object": "chat.completion" if chat else "text_completion",
        "created": created,
        "model": parsed.model,
        "choices": choices,
        "usage": _usage(handle, parsed.req.n),
    }
