"""The prompt of a request, as the parser of its API read it: what prefix matching and tokenization use.

Each parser plugin knows where its API keeps the prompt and builds one of these; plugins read the
prompt only through them, never by looking at the API or the body, so a new API is one parser file.

- :class:`TextPrompt`: one completion text (OpenAI completions with a string prompt, SGLang ``text``);
- :class:`ChatPrompt`: chat turns, system first (OpenAI chat, Anthropic Messages), rendered one by
  one as ``<|role|>content`` so a long conversation is never serialised whole, and turn N+1's
  rendering extends turn N's;
- :class:`TokenPrompt`: token ids the client already has (vLLM generate, a list-of-ints prompt);
- :class:`JsonPrompt`: APIs whose input has no plain-text form (Responses, conversations,
  embeddings): matched on its JSON form.

``prefix(limit)`` is the first ``limit`` bytes of the prompt as the model server will see it, in
order: what the approximate prefix index hashes. ``multimodal`` says whether it carries media (an
image, audio or video part), what the encode stage of disaggregated serving is for.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

__all__ = ["EMPTY_PROMPT", "ChatPrompt", "JsonPrompt", "Prompt", "TextPrompt", "TokenPrompt"]


class Prompt:
    """A request's prompt; the base class is the empty prompt (passthrough, header-only requests)."""

    __slots__ = ()

    def prefix(self, limit: int) -> bytes:
        """The first ``limit`` bytes of the prompt as the model server sees it."""
        return b""

    @property
    def multimodal(self) -> bool:
        """Whether the prompt carries media parts (images, audio, video)."""
        return False


EMPTY_PROMPT = Prompt()


@dataclass(frozen=True, slots=True)
class TextPrompt(Prompt):
    """A completion prompt; several strings are joined by single spaces, as the engines do."""

    parts: Sequence[str]

    @property
    def text(self) -> str:
        return " ".join(self.parts)

    def prefix(self, limit: int) -> bytes:
        joined = _join_until((p if i == 0 else " " + p for i, p in enumerate(self.parts)), limit)
        return joined.encode()[:limit]


@dataclass(frozen=True, slots=True)
class ChatPrompt(Prompt):
    """Chat turns (OpenAI's or Anthropic's shape); ``system`` is Anthropic's separate system prompt."""

    messages: Sequence[Any]
    system: Any = None

    def prefix(self, limit: int) -> bytes:
        head: Iterable[str] = () if self.system is None else (f"<|system|>{_content_text(self.system)}\n",)
        return _join_until(chain(head, _rendered(self.messages)), limit).encode()[:limit]

    @property
    def multimodal(self) -> bool:
        """Any content part of a media type (OpenAI's ``image_url``, ``input_audio``, vLLM's ``audio_url``,
        ``video_url``; Anthropic's ``image``), as upstream's documentation describes the check."""
        return any(
            isinstance(part, Mapping) and part.get("type") in _MEDIA_PARTS
            for m in self.messages
            if isinstance(m, Mapping) and isinstance(m.get("content"), list)
            for part in m["content"]
        )


@dataclass(frozen=True, slots=True)
class TokenPrompt(Prompt):
    """Token ids the client sent (nested lists for a batch are kept as sent)."""

    token_ids: Sequence[Any]

    def prefix(self, limit: int) -> bytes:
        return json.dumps(self.token_ids)[:limit].encode()[:limit]


@dataclass(frozen=True, slots=True)
class JsonPrompt(Prompt):
    """Input without a plain-text form, matched on its JSON values in order."""

    values: Sequence[Any]

    def prefix(self, limit: int) -> bytes:
        return _join_until((json.dumps(v) for v in self.values), limit).encode()[:limit]


_MEDIA_PARTS = frozenset({"image_url", "audio_url", "video_url", "input_audio", "image"})


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # OpenAI content parts
        return "".join(str(p.get("text", "")) if isinstance(p, dict) else str(p) for p in content)
    return "" if content is None else json.dumps(content, sort_keys=True)


def _join_until(parts: Iterable[str], limit: int) -> str:
    """Concatenate strings, stopping once ``limit`` characters are collected."""
    out: list[str] = []
    size = 0
    for part in parts:
        out.append(part)
        size += len(part)
        if size >= limit:
            break
    return "".join(out)[:limit]


def _rendered(messages: Sequence[Any]) -> Iterator[str]:
    """Chat messages as ``<|role|>content``, one string each, lazily."""
    for m in messages:
        if isinstance(m, Mapping):
            yield f"<|{m.get('role', '')}|>{_content_text(m.get('content'))}\n"
