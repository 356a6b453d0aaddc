"""The request parser plugins, with upstream's type names, path claims and validation, one module each.

- ``openai-parser``: completions, chat completions, responses, conversations, embeddings, the
  two ``/render`` variants and image generation;
- ``anthropic-parser``: ``messages`` and ``messages/count_tokens``;
- ``vllmhttp-parser``: vLLM's ``inference/v1/generate``;
- ``sglanghttp-parser``: SGLang's ``generate`` (pre-tokenized prompts);
- ``passthrough-parser``: claims nothing, so it takes every path the others do not; the body is
  forwarded untouched and the request is routed on its headers alone.

The configuration's ``requestHandler.parsers`` list decides which are in the table
(``epp.framework.parsing``). None of them takes parameters (as upstream); a configuration giving
some is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext
from epp.plugins.parsers import anthropic, openai, passthrough, sglang_http, vllm_http

__all__ = [
    "ANTHROPIC_TYPE",
    "DEFAULT_PARSER_TYPES",
    "OPENAI_TYPE",
    "PASSTHROUGH_TYPE",
    "SGLANG_HTTP_TYPE",
    "VLLM_HTTP_TYPE",
    "create_anthropic",
    "create_openai",
    "create_passthrough",
    "create_sglang_http",
    "create_vllm_http",
    "parser_of_type",
]

OPENAI_TYPE = openai.TYPE
ANTHROPIC_TYPE = anthropic.TYPE
VLLM_HTTP_TYPE = vllm_http.TYPE
PASSTHROUGH_TYPE = passthrough.TYPE
SGLANG_HTTP_TYPE = sglang_http.TYPE

DEFAULT_PARSER_TYPES = (OPENAI_TYPE, ANTHROPIC_TYPE, VLLM_HTTP_TYPE, PASSTHROUGH_TYPE)
"""The llm-d router's parsers when the configuration lists none, in its order (fallback last)."""

_CLASSES: Mapping[str, type[NamedPlugin]] = {
    OPENAI_TYPE: openai.OpenAIParser,
    ANTHROPIC_TYPE: anthropic.AnthropicParser,
    VLLM_HTTP_TYPE: vllm_http.VllmHttpParser,
    PASSTHROUGH_TYPE: passthrough.PassthroughParser,
    SGLANG_HTTP_TYPE: sglang_http.SglangHttpParser,
}


def parser_of_type(type_name: str, name: str = "") -> NamedPlugin:
    """A parser of an in-tree type, with default parameters (they take none)."""
    return _CLASSES[type_name](name)


def _create(type_name: str, name: str, parameters: Mapping[str, Any]) -> NamedPlugin:
    Params(type_name, parameters).done()
    return parser_of_type(type_name, name)


def create_openai(name: str, parameters: Mapping[str, Any], context: PluginContext) -> NamedPlugin:
    return _create(OPENAI_TYPE, name, parameters)


def create_anthropic(name: str, parameters: Mapping[str, Any], context: PluginContext) -> NamedPlugin:
    return _create(ANTHROPIC_TYPE, name, parameters)


def create_vllm_http(name: str, parameters: Mapping[str, Any], context: PluginContext) -> NamedPlugin:
    return _create(VLLM_HTTP_TYPE, name, parameters)


def create_passthrough(name: str, parameters: Mapping[str, Any], context: PluginContext) -> NamedPlugin:
    return _create(PASSTHROUGH_TYPE, name, parameters)


def create_sglang_http(name: str, parameters: Mapping[str, Any], context: PluginContext) -> NamedPlugin:
    return _create(SGLANG_HTTP_TYPE, name, parameters)
