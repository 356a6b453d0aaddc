"""Plugin identity, factories and the registry that maps upstream type names to factories.

A plugin is any object with a ``typed_name``; which extension points it serves is decided by the
protocols it satisfies (Filter, Scorer, Picker, ...). Factories receive the plugin's name, its
``parameters`` mapping from the EndpointPickerConfig and a :class:`PluginContext` of shared
services; they raise :class:`PluginConfigError` naming the bad parameter.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from epp.clock import Clock, SystemClock

__all__ = [
    "NamedPlugin",
    "Plugin",
    "PluginConfigError",
    "PluginContext",
    "PluginFactory",
    "PluginRegistry",
    "StatefulPlugin",
    "TypedName",
]


@dataclass(frozen=True, slots=True)
class TypedName:
    """``type`` is the registered type name (``queue-scorer``); ``name`` the instance name."""

    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.name}/{self.type}"


@runtime_checkable
class Plugin(Protocol):
    """Anything the config can instantiate."""

    @property
    def typed_name(self) -> TypedName: ...


class NamedPlugin:
    """Base of the in-tree plugins: holds the :class:`TypedName` (``plugin_type`` + instance name)."""

    __slots__ = ("typed_name",)
    plugin_type: ClassVar[str] = ""

    def __init__(self, name: str = "") -> None:
        self.typed_name = TypedName(self.plugin_type, name or self.plugin_type)


@runtime_checkable
class StatefulPlugin(Protocol):
    """A plugin whose state must outlive a configuration reload (the concurrency detector's in-flight counts).

    On a reload, the new instance of the same name and type is handed the old one, in the same
    loop step as the swap, so requests routed before the reload are still counted after it.
    """

    def inherit(self, previous: Plugin) -> None: ...


class PluginConfigError(ValueError):
    """Invalid plugin parameters or references; the message names the field path and value."""


@dataclass(frozen=True)
class PluginContext:
    """Shared services a factory may hand to its plugin (time, randomness seed, pool name)."""

    clock: Clock = field(default_factory=SystemClock)
    pool_name: str = ""
    seed: int | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)


PluginFactory = Callable[[str, Mapping[str, Any], PluginContext], Plugin]


class PluginRegistry:
    """Type name → factory; filled explicitly by ``epp.plugins.register_in_tree``.

    A type registered ``experimental`` (upstream's Alpha stability) is one a configuration may
    use only when the picker runs with ``--allow-experimental-plugins``; the loader checks it.
    """

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}
        self._experimental: set[str] = set()

    def register(self, type_name: str, factory: PluginFactory, *, experimental: bool = False) -> None:
        if type_name in self._factories:
            raise ValueError(f"plugin type {type_name!r} registered twice")
        self._factories[type_name] = factory
        if experimental:
            self._experimental.add(type_name)

    def is_experimental(self, type_name: str) -> bool:
        return type_name in self._experimental

    def types(self) -> Iterable[str]:
        return sorted(self._factories)

    def create(self, type_name: str, name: str, parameters: Mapping[str, Any], context: PluginContext) -> Plugin:
        factory = self._factories.get(type_name)
        if factory is None:
            known = ", ".join(self.types())
            raise PluginConfigError(f"unknown plugin type {type_name!r} (known: {known})")
        return factory(name, parameters, context)
