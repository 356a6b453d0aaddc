"""Inert placeholder for the upstream ``openai-parser``, whose work lives outside the scheduler.

Upstream's default EndpointPickerConfig names ``openai-parser`` as the request parser. In this
picker the body parser (``epp.extproc.request_body``) is built by the runtime, not from the
config, so the type only has to be *accepted*: each instance records its parameters for whoever
wants to read them and serves no extension point. Replace the entry in ``register_in_tree``
when a real parser plugin exists.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any

from epp.framework.plugin import PluginContext, TypedName

__all__ = ["OPENAI_PARSER_TYPE", "MarkerPlugin", "factory"]

OPENAI_PARSER_TYPE = "openai-parser"


class MarkerPlugin:
    """A configured plugin with no behaviour here; ``parameters`` are kept verbatim."""

    __slots__ = ("_typed_name", "parameters")

    def __init__(self, type_name: str, name: str, parameters: Mapping[str, Any]) -> None:
        self._typed_name = TypedName(type_name, name)
        self.parameters: Mapping[str, Any] = MappingProxyType(dict(parameters))

    @property
    def typed_name(self) -> TypedName:
        return self._typed_name


def factory(type_name: str) -> Callable[[str, Mapping[str, Any], PluginContext], MarkerPlugin]:
    """A plugin factory making :class:`MarkerPlugin` instances of ``type_name``."""

    def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> MarkerPlugin:
        return MarkerPlugin(type_name, name, parameters)

    return create
