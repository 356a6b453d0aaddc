"""A local ``tokenizer.json`` run on worker threads, so long prompts use several cores and never stall serving.

Hugging Face ``tokenizers`` releases the GIL in its batch entry points only: ``Tokenizer.encode``
holds it for the whole call (measured: a 400 KiB prompt stalled every other thread of the process,
the serving event loop included, for 0.4 s), while ``encode_batch_fast`` and ``encode_batch`` let
the event loop and other encodes run beside it (1.5-1.8x less CPU than ``encode``; the offsets
``encode_batch`` adds, which the prefix cache splits by, cost ~5% more than ``encode_batch_fast``).
So every encode is a batch call on a thread of this tokenizer's own pool (``workers`` threads):
N requests tokenize on N cores at once while the loop keeps serving.
Worker processes were measured too and lost: the prompt and its ids cross a pipe, which costs
the serving process about as much per request as the routing itself (docs/benchmarks.md).

Chat requests are rendered with ``tokenizer_config.json``'s ``chat_template`` (or, without one, the
``chat_template.jinja`` beside it, where newer transformers save it; jinja, sandboxed) on
the same thread, then encoded without special tokens (the template writes them). Ids come back as
``array('I')``: 4 bytes a token, hashed in place by the precise index. Every text, prompt or
rendered chat, goes through this tokenizer's prefix cache (``epp.tokenize.prefix``, bounded by
``cache_max_tokens``): a prompt that repeats an earlier one's beginning encodes only its new end,
if the tokenizer passed ``epp.tokenize.stability``'s proof at load; else whole texts are cached.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from array import array
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from epp.framework.plugin import PluginConfigError
from epp.tokenize.prefix import PrefixTokenCache
from epp.tokenize.stability import prove_prefix_stable

__all__ = ["LocalTokenizer", "TokenizationError", "default_workers"]

log = logging.getLogger(__name__)


class TokenizationError(Exception):
    """The prompt could not be tokenized (the request goes on without tokens)."""


def default_workers() -> int:
    """The cores this process may run on (its CPU affinity), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class LocalTokenizer:
    """A ``tokenizer.json`` (and, beside it, ``tokenizer_config.json``'s chat template), loaded once.

    ``path`` is the file or a directory holding it; errors name ``where`` (the parameter path).
    Made while a configuration loads, on the runtime's worker thread: the files are read by Python
    (which lets go of the GIL while it waits on them), then parsed (``Tokenizer.from_file`` would
    hold the GIL through the read, and with it the event loop).
    """

    def __init__(self, path: str, *, workers: int = 1, cache_max_tokens: int = 0, where: str = "tokenizerPath") -> None:
        from jinja2.sandbox import ImmutableSandboxedEnvironment
        from tokenizers import Tokenizer

        if workers < 1:
            raise PluginConfigError(f"workers must be >= 1, got {workers}")
        directory = path if os.path.isdir(path) else os.path.dirname(path)
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        try:
            with open(file, encoding="utf-8") as f:
                self._tokenizer = Tokenizer.from_str(f.read())
        except Exception as e:  # OSError, or tokenizers' plain Exception for a bad file
            raise PluginConfigError(f"{where}: cannot load {file!r}: {e}") from e
        self._template: Any = None
        self._special: dict[str, str] = {}
        config_file = os.path.join(directory, "tokenizer_config.json")
        template_file = os.path.join(directory, "chat_template.jinja")  # where newer transformers save it
        template = None
        if os.path.exists(config_file):
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
            template = config.get("chat_template")
            self._special = {k: v for k, v in config.items() if k in ("bos_token", "eos_token") and isinstance(v, str)}
        if not isinstance(template, str) and os.path.exists(template_file):
            with open(template_file, encoding="utf-8") as f:
                template = f.read()
        if isinstance(template, str):
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            self._template = env.from_string(template)
        self.workers = workers
        self._pool: ThreadPoolExecutor | None = None
        proof = prove_prefix_stable(self._tokenizer)
        if isinstance(proof, str):
            log.warning(
                "tokenizer not prefix-stable: its token cache keeps whole prompts only",
                extra={"tokenizer": file, "reason": proof},
            )
            self.cache = PrefixTokenCache(self._tokenizer, max_tokens=cache_max_tokens, unstable=proof)
        else:
            self.cache = PrefixTokenCache(self._tokenizer, max_tokens=cache_max_tokens, specials=proof)

    def _executor(self) -> ThreadPoolExecutor:
        pool = self._pool
        if pool is None:
            pool = self._pool = ThreadPoolExecutor(self.workers, thread_name_prefix="epp-tokenize")
        return pool

    def encode_prompt(self, prompt: str) -> array[int]:
        """The ids of a completion prompt (special tokens added as the tokenizer's post-processor says)."""
        return self.cache.encode(prompt, add_special=True)

    def encode_chat(self, messages: Sequence[Mapping[str, Any]]) -> array[int]:
        """The ids of chat ``messages`` rendered with the chat template (which writes the special tokens)."""
        if self._template is None:
            raise TokenizationError("no chat_template in tokenizer_config.json nor a chat_template.jinja")
        text = self._template.render(messages=messages, add_generation_prompt=True, **self._special)
        return self.cache.encode(text, add_special=False)

    async def prompt_ids(self, prompt: str) -> array[int]:
        """:meth:`encode_prompt` on a worker thread; cancelling the await drops a call not yet started."""
        return await asyncio.get_running_loop().run_in_executor(self._executor(), self.encode_prompt, prompt)

    async def chat_ids(self, messages: Sequence[Mapping[str, Any]]) -> array[int]:
        """:meth:`encode_chat` on a worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._executor(), self.encode_chat, messages)

    def close(self) -> None:
        """Stop the worker threads once their current encodes end (queued ones are dropped)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)
