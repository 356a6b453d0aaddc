"""token-producer: the prompt's token ids, before scheduling, for the prefix indexes.

Precise prefix routing compares the request's token blocks with the blocks the pods announce,
so the ids must be the engine's own. Two backends give them:

- ``vllm`` (llm-d's; also chosen by a bare ``modelName``): ``POST /v1/completions/render`` or
  ``/v1/chat/completions/render`` on the model server or a ``vllm launch render`` sidecar, so
  the chat template and the tokenizer are the engine's; ``vllm.url`` (default
  ``http://localhost:8000``), ``vllm.timeout`` (5 s) and ``vllm.mmTimeout`` (30 s, chat messages
  with content parts) as llm-d.
- ``local`` (ours): Hugging Face ``tokenizers`` with ``local.tokenizerPath`` (a
  ``tokenizer.json``, or a directory holding it and ``tokenizer_config.json``, e.g. a mounted
  ConfigMap); chat requests are rendered with that config's ``chat_template``. Encoding runs on
  a worker thread.

Results are cached (LRU by prompt), every call is bounded by the timeout, and a failure leaves
the request without tokens (it is never rejected for it). Without ``vllm``, ``local`` or
``modelName`` the plugin is llm-d's ``estimate`` backend (``token_estimate.py``): pseudo-tokens
from the prompt's bytes, enough for the approximate prefix index, never matching an engine's
blocks. The deprecated ``udsTokenizerConfig`` is refused. Every backend produces
``TokenizedPrompt/<its name>`` (``framework.data_keys``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import httpx
import orjson

from epp.framework.data import DataKey
from epp.framework.data_keys import TOKENIZED_PROMPT, TokenizedPrompt
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import ApiKind, InferenceRequest
from epp.plugins.token_estimate import EstimatingTokenProducer, estimate_parameters

__all__ = ["LocalTokenizer", "TokenProducer", "create"]

TYPE = "token-producer"
LEGACY_TYPE = "tokenizer"
"""Upstream's deprecated name for this type (the same plugin; the loader reports the old name)."""
log = logging.getLogger(__name__)

_DEFAULT_URL = "http://localhost:8000"
_CACHE_ENTRIES = 4096


class TokenizationError(Exception):
    """The prompt could not be tokenized (the request goes on without tokens)."""


class LocalTokenizer:
    """A ``tokenizer.json`` (and, beside it, ``tokenizer_config.json``'s chat template), loaded once."""

    def __init__(self, path: str) -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        directory = path if os.path.isdir(path) else os.path.dirname(path)
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        try:
            self._tokenizer = Tokenizer.from_file(file)
        except Exception as e:  # tokenizers raises plain Exception for a missing or bad file
            raise PluginConfigError(f"{TYPE}.parameters.local.tokenizerPath: cannot load {file!r}: {e}") from e
        self._template: Any = None
        self._special: dict[str, str] = {}
        config_file = os.path.join(directory, "tokenizer_config.json")
        if os.path.exists(config_file):
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
            template = config.get("chat_template")
            if isinstance(template, str):
                env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
                self._template = env.from_string(template)
            self._special = {k: v for k, v in config.items() if k in ("bos_token", "eos_token") and isinstance(v, str)}

    def encode_prompt(self, prompt: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(prompt).ids
        return ids

    def encode_chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        if self._template is None:
            raise TokenizationError("no chat_template in tokenizer_config.json")
        text = self._template.render(messages=messages, add_generation_prompt=True, **self._special)
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids


class TokenProducer(NamedPlugin):
    """DataProducer: fills ``request.token_ids`` for completions and chat completions."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_PRODUCER})

    def __init__(
        self,
        name: str,
        *,
        model_name: str = "",
        url: str = _DEFAULT_URL,
        timeout: float = 5.0,
        mm_timeout: float = 30.0,
        local: LocalTokenizer | None = None,
    ) -> None:
        super().__init__(name)
        self.model_name = model_name
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.mm_timeout = mm_timeout
        self._local = local
        self._client: httpx.AsyncClient | None = None
        self._cache: OrderedDict[bytes, list[int]] = OrderedDict()
        self.failures = 0

    def produces(self) -> Mapping[DataKey, type]:
        return {TOKENIZED_PROMPT.named(self.typed_name.name): TokenizedPrompt}

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState] = ()) -> None:
        if request.token_ids is not None or request.api not in (ApiKind.COMPLETIONS, ApiKind.CHAT_COMPLETIONS):
            return
        body = request.body
        chat = request.api is ApiKind.CHAT_COMPLETIONS
        payload = body.get("messages") if chat else body.get("prompt")
        if not payload or not isinstance(payload, str | list):
            return
        if not chat and isinstance(payload, list) and all(isinstance(t, int) for t in payload):
            request.token_ids = payload  # already token ids
            return
        key = (b"c" if chat else b"p") + orjson.dumps(payload)
        cached = self._cache.get(key)
        if cached is not None:
            self._cache.move_to_end(key)
            request.token_ids = cached
            return
        multimodal = chat and any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in payload)
        try:
            async with asyncio.timeout(self.mm_timeout if multimodal else self.timeout):
                ids = await self._tokenize(chat, payload, body)
        except (TokenizationError, TimeoutError, httpx.HTTPError, ValueError) as e:
            self.failures += 1
            log.warning(
                "tokenization failed; scheduling without tokens",
                extra={"plugin": str(self.typed_name), "error": f"{type(e).__name__}: {e}"},
            )
            return
        self._cache[key] = ids
        if len(self._cache) > _CACHE_ENTRIES:
            self._cache.popitem(last=False)
        request.token_ids = ids

    async def _tokenize(self, chat: bool, payload: Any, body: Mapping[str, Any]) -> list[int]:
        local = self._local
        if local is not None:
            if chat:
                return await asyncio.to_thread(local.encode_chat, payload)
            if not isinstance(payload, str):
                raise TokenizationError("the local backend tokenizes a single string prompt")
            return await asyncio.to_thread(local.encode_prompt, payload)
        return await self._render(chat, payload, body)

    async def _render(self, chat: bool, payload: Any, body: Mapping[str, Any]) -> list[int]:
        client = self._client
        if client is None:
            client = self._client = httpx.AsyncClient(timeout=max(self.timeout, self.mm_timeout))
        model = self.model_name or body.get("model") or ""
        if chat:
            request: dict[str, Any] = {"model": model, "messages": payload}
            for extra in ("tools", "chat_template_kwargs", "add_generation_prompt", "continue_final_message"):
                if extra in body:
                    request[extra] = body[extra]
            path = "/v1/chat/completions/render"
        else:
            request = {"model": model, "prompt": payload}
            path = "/v1/completions/render"
        # vLLM refuses a body without this header (400 "Unsupported Media Type"): found against a real one.
        headers = {"Content-Type": "application/json"}
        response = await client.post(self.url + path, content=orjson.dumps(request), headers=headers)
        if response.status_code != 200:
            raise TokenizationError(f"{path} answered {response.status_code}: {response.text[:200]}")
        doc = response.json()
        if isinstance(doc, list):  # completions: one entry per prompt
            doc = doc[0] if doc else {}
        ids = doc.get("token_ids") if isinstance(doc, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise TokenizationError(f"{path} returned no token_ids")
        return ids

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> TokenProducer | EstimatingTokenProducer:
    """Factory; llm-d's parameter names, plus ``local.tokenizerPath``."""
    p = Params(TYPE, params)
    model_name = p.text("modelName") or ""
    vllm = p.nested("vllm")
    local = p.nested("local")
    estimate = p.nested("estimate")
    if p.present("udsTokenizerConfig"):
        raise PluginConfigError(
            f"{TYPE}.parameters.udsTokenizerConfig: llm-d's deprecated tokenizer sidecar is not supported here: "
            "use vllm (the model server's render endpoints) or local.tokenizerPath"
        )
    p.done()
    engine_backends = [n for n, v in (("vllm", vllm), ("local", local)) if v is not None]
    if estimate is not None and (engine_backends or model_name):
        raise PluginConfigError(f"{TYPE}.parameters: estimate excludes {engine_backends or ['modelName']}")
    if estimate is not None or not (engine_backends or model_name):
        estimate_parameters(estimate)
        return EstimatingTokenProducer(name)
    if local is not None:
        if vllm is not None:
            raise PluginConfigError(f"{TYPE}.parameters: set one of vllm and local, not both")
        path = local.string("tokenizerPath", "")
        local.done()
        if not path:
            raise PluginConfigError(f"{TYPE}.parameters.local.tokenizerPath: required")
        return TokenProducer(name, model_name=model_name, local=LocalTokenizer(path))
    url, timeout, mm_timeout = _DEFAULT_URL, 5.0, 30.0
    if vllm is not None:
        url = vllm.string("url", _DEFAULT_URL)
        timeout = vllm.duration("timeout", 5.0)
        mm_timeout = vllm.duration("mmTimeout", 30.0)
        vllm.done()
    if not url.startswith("http://"):
        raise PluginConfigError(f"{TYPE}.parameters.vllm.url: must be http:// (as llm-d), got {url!r}")
    return TokenProducer(name, model_name=model_name, url=url, timeout=timeout, mm_timeout=mm_timeout)
