"""The simulator's HTTP face: vLLM's OpenAI-compatible API, ``/metrics``, and test admin endpoints.

``/v1/completions`` and ``/v1/chat/completions`` (JSON with ``usage``, or SSE chunks ending in
``data: [DONE]`` with a usage chunk when ``stream_options.include_usage``), ``/v1/models``,
``/v1/messages`` (Anthropic's Messages API, as vLLM serves it: ``anthropic.py``), SGLang's
``/generate`` (``sglang.py``),
``/health``, ``/metrics``, vLLM's runtime adapter endpoints, and for tests ``/_sim/pin``
(POST/DELETE), ``/_sim/fail`` (POST ``{"status": 500}``: every completion is answered with that
status while ``/metrics`` keeps answering, as a vLLM whose engine died does; DELETE: serve again)
and ``/_sim/stats``; the tokenization endpoints are ``tokenize_api``'s. Errors use OpenAI's
``{"error": {...}}`` shape, worded as vLLM's (``openai_errors``); answers are ``answers``'s.
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

from .answers import FINGERPRINT, full_response, token_text, usage
from .anthropic import (
    MessagesError,
    MessagesRequest,
    message_body,
    parse_messages,
    stream_message,
)
from .anthropic import error_response as anthropic_error
from .config import Pins, PinsError
from .disagg import KvTransfer, cache_hit_threshold, kv_transfer, prefill_answer_params
from .engine import Engine, EngineStoppedError, GenerationRequest, InvalidRequestError, RequestHandle
from .exposition import CONTENT_TYPE
from .openai_errors import OpenAIError, dumps, error_response, json_response, parse_body, require_json
from .prompts import chat_prompt, completion_prompt
from .sglang import GenerateError, GenerateRequest, generate_body, parse_generate, stream_generate
from .sglang import error_response as sglang_error
from .tokenize_api import TokenizeEndpoints
from .tokenizer import SimTokenizer, TokenizerError

__all__ = ["SimServer"]

#: requests the HTTP instrumentator counts (vLLM excludes /metrics, /health and friends)
_INSTRUMENTED = frozenset({"/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/models"})


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
    if isinstance(exc, OpenAIError):
        return exc.response()
    if isinstance(exc, EngineStoppedError):
        return error_response(503, str(exc), "ServiceUnavailableError")
    return error_response(400, str(exc), "BadRequestError", getattr(exc, "param", None))


def _anthropic_refusal(exc: Exception) -> web.Response:
    if isinstance(exc, MessagesError):
        return anthropic_error(exc.status, exc.message, exc.err_type)
    if isinstance(exc, EngineStoppedError):
        return anthropic_error(503, str(exc), "overloaded_error")
    return anthropic_error(400, str(exc), "invalid_request_error")


_OPENAI = _Api(OpenAIError, _openai_refusal)
_ANTHROPIC = _Api(MessagesError, _anthropic_refusal)
_SGLANG = _Api(GenerateError, sglang_error)


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
        app.router.add_post("/generate", self._sglang_generate)
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
        TokenizeEndpoints(self).add_routes(app)
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
            details = self.engine.config.enable_prompt_tokens_details
            answer = full_response(handle, parsed.model, parsed.req.n, chat=chat, details=details)
            if parsed.req.remote_decode:
                answer["kv_transfer_params"] = prefill_answer_params(self.address, handle.hashes)
            return json_response(answer)

        return await self._generate(request, lambda raw: self._parse(raw, chat=chat), reply, _OPENAI)

    async def _messages(self, request: web.Request) -> web.StreamResponse:
        async def reply(parsed: MessagesRequest, handle: RequestHandle) -> web.StreamResponse:
            if parsed.req.stream:
                return await stream_message(request, handle, parsed.model, token_text)
            await handle.wait()
            return json_response(message_body(handle, parsed.model, token_text))

        engine = self.engine
        return await self._generate(
            request, lambda raw: parse_messages(raw, engine.config.model, engine.adapters), reply, _ANTHROPIC
        )

    async def _sglang_generate(self, request: web.Request) -> web.StreamResponse:
        async def reply(parsed: GenerateRequest, handle: RequestHandle) -> web.StreamResponse:
            if parsed.req.stream:
                return await stream_generate(request, handle, token_text)
            await handle.wait()
            return json_response(generate_body(handle, token_text))

        model = self.engine.config.model
        return await self._generate(request, lambda raw: parse_generate(raw, model), reply, _SGLANG)

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
            return error_response(self.failing, "simulated failure (/_sim/fail)", "InternalServerError")
        try:
            if api is _OPENAI:
                require_json(request)
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
        body = parse_body(raw)
        model, adapter = self.served_model(body)
        prompt = self.prompt_of(body, chat=chat)
        max_tokens = body.get("max_completion_tokens") if chat else None
        if max_tokens is None:
            max_tokens = body.get("max_tokens")
        stream_options = body.get("stream_options") or {}
        if not isinstance(stream_options, dict):
            raise OpenAIError(400, "stream_options must be an object", param="stream_options")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise OpenAIError(400, f"stream must be a boolean, got {stream!r}", param="stream")
        try:
            transfer = kv_transfer(body)
            threshold = cache_hit_threshold(body)
        except ValueError as exc:
            raise OpenAIError(400, str(exc), param="kv_transfer_params") from exc
        remote_decode = transfer is not None and transfer.remote_decode
        if remote_decode and stream:
            raise OpenAIError(400, "Prefill does not support streaming", param="stream")
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

    def served_model(self, body: Mapping[str, Any]) -> tuple[str, str | None]:
        """(the model the body names, the adapter that is, or None for the base model); 404 as vLLM words it."""
        cfg = self.engine.config
        model = body.get("model", cfg.model)
        if not isinstance(model, str):
            raise OpenAIError(400, f"model must be a string, got {model!r}", param="model")
        if model == cfg.model:
            return model, None
        if model not in self.engine.adapters:
            message = f"The model `{model}` does not exist. Valid aliases: {cfg.model}."
            raise OpenAIError(404, message, err_type="NotFoundError", param="model")
        return model, model

    @property
    def max_model_len(self) -> int:
        return self.engine.config.max_model_len

    def prompt_of(self, body: Mapping[str, Any], *, chat: bool, truncate: bool = True) -> str | list[int]:
        """The prompt as the engine sees it: token ids when there is a tokenizer (chat via its template).

        Text is tokenized as vLLM tokenizes it for a request, truncated at ``max_model_len + 1``
        tokens (enough to refuse it as too long); ``truncate=False`` keeps every token (``/tokenize``).
        """
        tokenizer = self.tokenizer
        if chat:
            text = chat_prompt(body.get("messages"))  # validates the messages
            if tokenizer is None:
                return text
            try:
                ids = tokenizer.render_chat(body["messages"])
            except TokenizerError as exc:
                raise OpenAIError(400, str(exc), param="messages") from exc
        else:
            prompt = completion_prompt(body.get("prompt"))
            if tokenizer is None or not isinstance(prompt, str):
                return prompt
            ids = tokenizer.encode(prompt)
        return ids[: self.max_model_len + 1] if truncate else ids

    async def _reset_prefix_cache(self, request: web.Request) -> web.Response:
        if not self.engine.reset_prefix_cache():
            return error_response(
                400, "cannot reset the prefix cache while requests hold cached blocks", "BadRequestError"
            )
        return web.Response(status=200)

    async def _stream(
        self, request: web.Request, handle: RequestHandle, parsed: _Parsed, *, chat: bool
    ) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream; charset=utf-8", "Cache-Control": "no-cache"}
        )
        await resp.prepare(request)
        rid = ("chatcmpl-" if chat else "cmpl-") + uuid.uuid4().hex[:16]
        created = int(time.time())
        head = dumps({"id": rid, "object": "chat.completion.chunk" if chat else "text_completion"})[:-1]
        head += f',"created":{created},"model":{dumps(parsed.model)},"choices":['
        n = parsed.req.n
        # vLLM sends the chat role delta with the first output, once the prefill is done: the first
        # byte of the body marks the time to first token, as on a real server.
        role = ""
        if chat:
            choices = ",".join(
                f'{{"index":{c},"delta":{{"role":"assistant","content":""}},"logprobs":null,"finish_reason":null}}'
                for c in range(n)
            )
            role = f'data: {head}{choices}],"prompt_token_ids":null,"prompt_text":null}}\n\n'
        sent = 0
        try:
            async for count in handle.tokens():
                # vLLM 0.32's chunk fields: stop_reason appears in a chat chunk only once it finishes.
                finish = f'{dumps(handle.finish_reason)},"stop_reason":null' if handle.done else "null"
                chunks = [role] if role else []
                role = ""
                for c in range(n):
                    text = dumps("".join(token_text(handle.seed, c, i) for i in range(sent, sent + count)))
                    if chat:
                        choice = (
                            f'{{"index":{c},"delta":{{"content":{text}}},"logprobs":null,"finish_reason":{finish},'
                            '"token_ids":null}'
                        )
                    else:
                        stop = "" if handle.done else ',"stop_reason":null'
                        choice = (
                            f'{{"index":{c},"text":{text},"logprobs":null,"finish_reason":{finish}{stop},'
                            '"prompt_token_ids":null,"token_ids":null}'
                        )
                    chunks.append(f"data: {head}{choice}]}}\n\n")
                sent += count
                await resp.write("".join(chunks).encode())
        except EngineStoppedError as exc:
            err = {"error": {"message": str(exc), "type": "ServiceUnavailableError", "param": None, "code": 503}}
            await resp.write(f"data: {dumps(err)}\n\n".encode())
        else:
            if parsed.include_usage:
                details = self.engine.config.enable_prompt_tokens_details
                used = dumps(usage(handle, n, details=details, streamed=True))
                tail = f',"system_fingerprint":{dumps(FINGERPRINT)}'
                await resp.write(f'data: {head}],"usage":{used}{tail}}}\n\n'.encode())
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
        return json_response({"object": "list", "data": data})

    async def _load_adapter(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        name, path = body.get("lora_name"), body.get("lora_path")
        if not isinstance(name, str) or not isinstance(path, str):
            return error_response(400, "Both 'lora_name' and 'lora_path' must be provided.", "BadRequestError")
        try:
            self.engine.add_adapter(name, path)
        except InvalidRequestError as exc:
            return error_response(400, str(exc), "InvalidUserInput")
        return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")

    async def _unload_adapter(self, request: web.Request) -> web.Response:
        body = await _json_object(request)
        name = body.get("lora_name")
        if not isinstance(name, str):
            return error_response(400, "'lora_name' must be provided.", "BadRequestError")
        try:
            self.engine.remove_adapter(name)
        except InvalidRequestError as exc:
            return error_response(404 if "cannot be found" in str(exc) else 400, str(exc), "NotFoundError")
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
            return error_response(400, f"{kind}: {exc}", "BadRequestError")
        return json_response({"pins": self.engine.pins.to_json()})

    async def _unpin(self, request: web.Request) -> web.Response:
        self.engine.set_pins(Pins())
        return json_response({"pins": {}})

    async def _fail(self, request: web.Request) -> web.Response:
        status = (await _json_object(request)).get("status", 500)
        if isinstance(status, bool) or not isinstance(status, int) or not 400 <= status <= 599:
            return error_response(
                400, f"status must be an HTTP error status (400-599), got {status!r}", "BadRequestError"
            )
        self.failing = status
        return json_response({"failing": status})

    async def _recover(self, request: web.Request) -> web.Response:
        self.failing = 0
        return json_response({"failing": 0})

    async def _get_stats(self, request: web.Request) -> web.Response:
        return json_response(self.stats())


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
        raise OpenAIError(400, f"{name} must be an integer{bound}, got {value!r}", param=name)
    return value
