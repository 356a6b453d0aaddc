"""The request parser plugins, with upstream's type names and path claims.

Each parser only *declares* what it reads: the path suffixes it claims and the API of the bodies
sent there (``epp.framework.parsing``). Decoding and validating a body by its API is the ext_proc
layer's (``epp.extproc.request_body``), which plugins may not import; the configuration's
``requestHandler.parsers`` list decides which parsers are in the table. Claims are upstream's:

- ``openai-parser``: completions, chat completions, responses, conversations, embeddings, the
  two ``/render`` variants and image generation;
- ``anthropic-parser``: ``messages`` and ``messages/count_tokens``;
- ``vllmhttp-parser``: vLLM's ``inference/v1/generate`` (token ids in, OpenAI-shaped usage out);
- ``passthrough-parser``: claims nothing, so it takes every path the others do not; the body is
  forwarded untouched and the request is routed on its headers alone.

None of them takes parameters (as upstream); a configuration giving some is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from epp.framework.plugin import PluginContext, PluginKind, TypedName
from epp.framework.request import ApiKind
from epp.plugins._params import Params

__all__ = [
    "ANTHROPIC_TYPE",
    "DEFAULT_PARSER_TYPES",
    "OPENAI_TYPE",
    "PASSTHROUGH_TYPE",
    "VLLM_HTTP_TYPE",
    "ParserPlugin",
    "create_anthropic",
    "create_openai",
    "create_passthrough",
    "create_vllm_http",
]

OPENAI_TYPE = "openai-parser"
ANTHROPIC_TYPE = "anthropic-parser"
VLLM_HTTP_TYPE = "vllmhttp-parser"
PASSTHROUGH_TYPE = "passthrough-parser"

DEFAULT_PARSER_TYPES = (OPENAI_TYPE, ANTHROPIC_TYPE, VLLM_HTTP_TYPE, PASSTHROUGH_TYPE)
"""The llm-d router's parsers when the configuration lists none, in its order (fallback last)."""

_CLAIMS: Mapping[str, tuple[tuple[str, ApiKind], ...]] = {
    OPENAI_TYPE: (
        ("chat/completions", ApiKind.CHAT_COMPLETIONS),
        ("completions", ApiKind.COMPLETIONS),
        ("embeddings", ApiKind.EMBEDDINGS),
        ("responses", ApiKind.RESPONSES),
        ("conversations", ApiKind.CONVERSATIONS),
        ("chat/completions/render", ApiKind.CHAT_COMPLETIONS),
        ("completions/render", ApiKind.COMPLETIONS),
        ("images/generations", ApiKind.IMAGES_GENERATIONS),
    ),
    ANTHROPIC_TYPE: (("messages", ApiKind.MESSAGES), ("messages/count_tokens", ApiKind.COUNT_TOKENS)),
    VLLM_HTTP_TYPE: (("inference/v1/generate", ApiKind.GENERATE),),
    PASSTHROUGH_TYPE: (),
}


class ParserPlugin:
    """One configured parser: its type decides its claims."""

    __slots__ = ("_claims", "typed_name")
    kinds: ClassVar[frozenset[PluginKind]] = frozenset({PluginKind.PARSER})

    def __init__(self, type_name: str, name: str = "") -> None:
        self.typed_name = TypedName(type_name, name or type_name)
        self._claims = _CLAIMS[type_name]

    @property
    def claims(self) -> Sequence[tuple[str, ApiKind]]:
        return self._claims

    @property
    def fallback_api(self) -> ApiKind:
        return ApiKind.PASSTHROUGH


def _create(type_name: str, name: str, parameters: Mapping[str, Any]) -> ParserPlugin:
    Params(type_name, parameters).done()
    return ParserPlugin(type_name, name)


def create_openai(name: str, parameters: Mapping[str, Any], context: PluginContext) -> ParserPlugin:
    return _create(OPENAI_TYPE, name, parameters)


def create_anthropic(name: str, parameters: Mapping[str, Any], context: PluginContext) -> ParserPlugin:
    return _create(ANTHROPIC_TYPE, name, parameters)


def create_vllm_http(name: str, parameters: Mapping[str, Any], context: PluginContext) -> ParserPlugin:
    return _create(VLLM_HTTP_TYPE, name, parameters)


def create_passthrough(name: str, parameters: Mapping[str, Any], context: PluginContext) -> ParserPlugin:
    return _create(PASSTHROUGH_TYPE, name, parameters)
