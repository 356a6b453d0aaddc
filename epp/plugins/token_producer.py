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
  ``local.workers`` threads of its own (default: the cores the process may use), without the
  GIL (``epp.tokenize.local``), so long prompts tokenize on several cores at once.

The render calls go through the picker's one shared HTTP client (``PluginContext.http``; the
``vllm`` backend refuses to load without one). Results are cached, bounded by ``cacheMaxTokens``
ids in total (16 Mi = 64 MiB by default; 0 turns it off): ``vllm``'s by a digest of the prompt
(``epp.tokenize.cache``), ``local``'s by chunks of the text, so a prompt that repeats an earlier
one's beginning encodes only its new end (``epp.tokenize.prefix``, exact, for tokenizers that
prove prefix-stable at load; others cache whole prompts). Every call is bounded by the timeout,
and a failure leaves the request without tokens (it is never rejected for it). Without ``vllm``,
``local`` or ``modelName`` the plugin is llm-d's ``estimate`` backend (``token_estimate.py``):
pseudo-tokens from the prompt's bytes, enough for the approximate prefix index, never matching an
engine's blocks. The deprecated ``udsTokenizerConfig`` is refused. Every backend produces ``TokenizedPrompt/<its
name>`` (``framework.data_keys``).
"""

from __future__ import annotations

import asyncio
import logging
from array import array
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

from epp.framework.data import DataKey
from epp.framework.data_keys import TOKENIZED_PROMPT, TokenizedPrompt
from epp.framework.endpoint import EndpointState
from epp.framework.http import HttpClient, HttpError
from epp.framework.measures import Measurements, TokenCacheCounts
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import ApiKind, InferenceRequest
from epp.plugins.token_estimate import EstimatingTokenProducer, estimate_parameters
from epp.tokenize.cache import TokenCache, cache_key
from epp.tokenize.local import LocalTokenizer, TokenizationError, default_workers

__all__ = ["TokenProducer", "create"]

TYPE = "token-producer"
LEGACY_TYPE = "tokenizer"
"""Upstream's deprecated name for this type (the same plugin; the loader reports the old name)."""
log = logging.getLogger(__name__)

_DEFAULT_URL = "http://localhost:8000"
DEFAULT_CACHE_TOKENS = 16 * 1024 * 1024


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
        cache_max_tokens: int = DEFAULT_CACHE_TOKENS,
        http: HttpClient | None = None,
    ) -> None:
        """``local`` or ``http`` (the render calls' client): one of them is required."""
        super().__init__(name)
        if local is None and http is None:
            raise PluginConfigError(f"{TYPE}: the vllm backend needs the picker's HTTP client (none was given)")
        self.model_name = model_name
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.mm_timeout = mm_timeout
        self._local = local
        self._http = http
        self.cache: TokenCache[array[int]] = TokenCache(0 if local is not None else cache_max_tokens)
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
        key = None
        if self._local is None:  # the local tokenizer has its own prefix cache
            key = cache_key(b"c" if chat else b"p", orjson.dumps(payload))
            cached = self.cache.get(key)
            if cached is not None:
                request.token_ids = cached
                return
        multimodal = chat and any(isinstance(m, dict) and isinstance(m.get("content"), list) for m in payload)
        budget = self.mm_timeout if multimodal else self.timeout
        try:
            async with asyncio.timeout(budget):
                ids = await self._tokenize(chat, payload, body, budget)
        except (TokenizationError, TimeoutError, HttpError, ValueError) as e:
            self.failures += 1
            log.warning(
                "tokenization failed; scheduling without tokens",
                extra={"plugin": str(self.typed_name), "error": f"{type(e).__name__}: {e}"},
            )
            return
        if key is not None:
            self.cache.put(key, ids)
        request.token_ids = ids

    async def _tokenize(self, chat: bool, payload: Any, body: Mapping[str, Any], budget: float) -> array[int]:
        local = self._local
        if local is not None:
            if chat:
                return await local.chat_ids(payload)
            if not isinstance(payload, str):
                raise TokenizationError("the local backend tokenizes a single string prompt")
            return await local.prompt_ids(payload)
        assert self._http is not None  # the constructor requires one of the two
        return await self._render(self._http, chat, payload, body, budget)

    async def _render(
        self, http: HttpClient, chat: bool, payload: Any, body: Mapping[str, Any], budget: float
    ) -> array[int]:
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
        # vLLM refuses a body without a JSON Content-Type (400 "Unsupported Media Type"): found against a real one.
        response = await http.post(
            self.url + path, orjson.dumps(request), content_type="application/json", timeout=budget
        )
        if response.status != 200:
            text = response.body[:200].decode("utf-8", "replace")
            raise TokenizationError(f"{path} answered {response.status}: {text}")
        doc = orjson.loads(response.body)
        if isinstance(doc, list):  # completions: one entry per prompt
            doc = doc[0] if doc else {}
        ids = doc.get("token_ids") if isinstance(doc, dict) else None
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise TokenizationError(f"{path} returned no token_ids")
        try:
            return array("I", ids)
        except OverflowError as e:  # a negative id, or one past 32 bits: no engine's
            raise TokenizationError(f"{path} returned a token id out of range") from e

    def measure(self, into: Measurements) -> None:
        """The token cache's counts (the local tokenizer's prefix cache, or the whole-prompt cache)."""
        local = self._local
        if local is None:
            cache = self.cache
            counts = TokenCacheCounts(cache.hits, cache.misses, cache.evictions, tokens=cache.tokens)
        else:
            p = local.cache
            counts = TokenCacheCounts(
                p.hits,
                p.misses,
                p.evictions,
                p.prefix_tokens,
                p.seam_failures,
                p.tokens,
                prefix_reuse=p.chunk_chars > 0,
            )
        into.token_cache(self.typed_name, counts)

    @property
    def local_threads(self) -> int:
        """The local tokenizer's threads (0 with the vllm backend)."""
        return self._local.workers if self._local is not None else 0

    async def aclose(self) -> None:
        if self._local is not None:
            self._local.close()


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> TokenProducer | EstimatingTokenProducer:
    """Factory; llm-d's parameter names, plus ``local.tokenizerPath``."""
    p = Params(TYPE, params)
    model_name = p.text("modelName") or ""
    cache_tokens = p.integer("cacheMaxTokens", DEFAULT_CACHE_TOKENS, minimum=0)
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
        # By default the cores this process may use, shared with the pod's other serving processes (--workers).
        workers = local.integer("workers", 0, minimum=1) or max(1, default_workers() // context.serving_processes)
        local.done()
        if not path:
            raise PluginConfigError(f"{TYPE}.parameters.local.tokenizerPath: required")
        tokenizer = LocalTokenizer(
            path, workers=workers, cache_max_tokens=cache_tokens, where=f"{TYPE}.parameters.local.tokenizerPath"
        )
        return TokenProducer(name, model_name=model_name, local=tokenizer, cache_max_tokens=cache_tokens)
    url, timeout, mm_timeout = _DEFAULT_URL, 5.0, 30.0
    if vllm is not None:
        url = vllm.string("url", _DEFAULT_URL)
        timeout = vllm.duration("timeout", 5.0)
        mm_timeout = vllm.duration("mmTimeout", 30.0)
        vllm.done()
    if not url.startswith("http://"):
        raise PluginConfigError(f"{TYPE}.parameters.vllm.url: must be http:// (as llm-d), got {url!r}")
    return TokenProducer(
        name,
        model_name=model_name,
        url=url,
        timeout=timeout,
        mm_timeout=mm_timeout,
        cache_max_tokens=cache_tokens,
        http=context.http,
    )
