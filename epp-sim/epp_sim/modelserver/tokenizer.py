"""The simulator's real tokenizer: a Hugging Face ``tokenizer.json`` and its chat template.

With ``--tokenizer`` (a ``tokenizer.json``, or a directory holding it and
``tokenizer_config.json``), prompts become real token ids, as vLLM's do: the KV events carry
them, the render and tokenize endpoints return them, and usage counts them. A completion prompt
is encoded with the tokenizer's special tokens; chat messages are rendered with the chat
template (Jinja, ``add_generation_prompt`` on) and encoded without adding more. The template is
``chat_template.jinja`` beside the tokenizer (where transformers 5 saves it, so a model folder
vLLM serves works as it is), else the config's ``chat_template``. Kept
apart from the picker's tokenizer on purpose (the simulator shares no code with the picker).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import Tokenizer

__all__ = ["SimTokenizer", "TokenizerError"]


class TokenizerError(ValueError):
    """A tokenizer that cannot load, or a chat request without a chat template."""


class SimTokenizer:
    def __init__(self, path: str) -> None:
        directory = path if os.path.isdir(path) else os.path.dirname(path)
        file = os.path.join(path, "tokenizer.json") if os.path.isdir(path) else path
        try:
            self._tokenizer = Tokenizer.from_file(file)
        except Exception as e:  # tokenizers raises plain Exception
            raise TokenizerError(f"--tokenizer {path!r}: cannot load {file!r}: {e}") from e
        self._template: Any = None
        self._special: dict[str, str] = {}
        template: str | None = None
        config_file = os.path.join(directory, "tokenizer_config.json")
        if os.path.exists(config_file):
            with open(config_file, encoding="utf-8") as f:
                config = json.load(f)
            if isinstance(config.get("chat_template"), str):
                template = config["chat_template"]
            self._special = {k: v for k, v in config.items() if k in ("bos_token", "eos_token") and isinstance(v, str)}
        template_file = os.path.join(directory, "chat_template.jinja")
        if os.path.exists(template_file):
            with open(template_file, encoding="utf-8") as f:
                template = f.read()
        if template is not None:
            env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
            self._template = env.from_string(template)

    def encode(self, text: str) -> list[int]:
        ids: list[int] = self._tokenizer.encode(text).ids
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self._tokenizer.decode(list(ids))
        return text

    def render_chat(self, messages: Sequence[Mapping[str, Any]]) -> list[int]:
        if self._template is None:
            raise TokenizerError("the tokenizer has no chat template (chat_template.jinja or tokenizer_config.json)")
        text = self._template.render(messages=messages, add_generation_prompt=True, **self._special)
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=False).ids
        return ids
