"""Plugin identity, factories and the registry that maps upstream type names to factories.

A plugin is any object with a ``typed_name``. Which extension points it serves is *declared* by its
type (:attr:`NamedPlugin.kinds`, a set of :class:`PluginKind`), as a Go plugin's type declares the
interfaces it implements: the loader uses a plugin only in the kinds it declares (and checks it
implements each), never because a method happens to share a name with another kind's (a flow
fairness policy's ``pick`` is not a scheduling picker's). Factories receive the plugin's name, its
``parameters`` mapping from the EndpointPickerConfig and a :class:`PluginContext` of shared
services; they raise :class:`PluginConfigError` naming the bad parameter. A factory runs while a
configuration loads, on a worker thread, and that configuration may be refused and dropped: it
may read files, but it starts nothing (no task, socket, client, metric series or log line). What
a plugin runs starts once its configuration is in force (its endpoint hooks, its first use).
``tests/config/test_pure_load.py`` loads every in-tree type on a worker thread to check it.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from epp.clock import Clock, SystemClock
from epp.framework.http import HttpClient

__all__ = [
    "NamedPlugin",
    "Plugin",
    "PluginConfigError",
    "PluginContext",
    "PluginFactory",
    "PluginKind",
    "PluginRegistry",
    "RefusedTypeError",
    "StatefulPlugin",
    "TypedName",
    "declared_kinds",
]


class PluginKind(enum.StrEnum):
    """An extension point a plugin type declares it serves (the values are upstream's extension-point names)."""

    FILTER = "Filter"
    SCORER = "Scorer"
    PICKER = "Picker"
    PROFILE_HANDLER = "ProfileHandler"
    DATA_PRODUCER = "PrepareData"
    PRE_REQUEST = "PreRequest"
    POST_RESPONSE = "PostResponse"
    IN_FLIGHT_ESTIMATOR = "InFlightEstimator"
    SATURATION_DETECTOR = "SaturationDetector"
    PARSER = "Parser"
    ORDERING_POLICY = "OrderingPolicy"
    FAIRNESS_POLICY = "FairnessPolicy"
    USAGE_LIMIT_POLICY = "UsageLimitPolicy"
    DATA_SOURCE = "DataSource"
    DATA_EXTRACTOR = "Extractor"
    ENDPOINT_SOURCE = "EndpointSource"
    ENDPOINT_DISCOVERY = "EndpointDiscovery"
    ADMITTER = "Admission"
    RESPONSE_STREAMING = "ResponseStreaming"
    REQUEST_HEADER = "RequestHeaderProcessor"


def declared_kinds(plugin: object) -> frozenset[PluginKind]:
    """The kinds ``plugin``'s type declares (none for an object that declares nothing)."""
    kinds = getattr(plugin, "kinds", None)
    return kinds if isinstance(kinds, frozenset) else frozenset()


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
    """Base of the in-tree plugins: holds the :class:`TypedName` (``plugin_type`` + instance name)
    and declares the plugin's :class:`PluginKind` set (``kinds``)."""

    __slots__ = ("typed_name",)
    plugin_type: ClassVar[str] = ""
    kinds: ClassVar[frozenset[PluginKind]] = frozenset()

    def __init__(self, name: str = "") -> None:
        self.typed_name = TypedName(self.plugin_type, name or self.plugin_type)


@runtime_checkable
class StatefulPlugin(Protocol):
    """A plugin whose state must outlive a configuration reload (the concurrency detector's in-flight counts).

    On a reload, the new instance of the same name and type is handed the old one, in the same
    loop step as the swap, so requests routed before the reload are still counted after it.
    """

    def inherit(self, previous: Plugin) -> None:
        """Take over ``previous``'s state (the instance of the same name and type being replaced)."""
        ...


class PluginConfigError(ValueError):
    """Invalid plugin parameters or references; the message names the field path and value."""


class RefusedTypeError(PluginConfigError):
    """A plugin type upstream registers that this picker refuses by name (the message says why)."""


@dataclass(frozen=True)
class PluginContext:
    """Shared services a factory may hand to its plugin (time, randomness seed, pool name, HTTP client).

    ``http`` is the process's one shared client (None where nothing made one: a plugin that needs
    it refuses to load without it). ``health(name, ok)`` sets a health detail (a gRPC health
    service name of its own that goes NOT_SERVING while a part the picker can run without is not
    well; readiness ignores it); a plugin calls it only once its configuration is in force.
    """

    clock: Clock = field(default_factory=SystemClock)
    pool_name: str = ""
    seed: int | None = None
    extras: Mapping[str, Any] = field(default_factory=dict)
    http: HttpClient | None = None
    pool_namespace: str = ""
    health: Callable[[str, bool], None] | None = None
    serving_processes: int = 1
    """How many processes of this picker pod load the configuration (``epp serve --workers``): a plugin
    holding what only one process can (a bound socket) refuses to load with more."""


PluginFactory = Callable[[str, Mapping[str, Any], PluginContext], Plugin]


class PluginRegistry:
    """Type name → factory; filled explicitly by ``epp.plugins.register_in_tree``.

    A type registered ``experimental`` (upstream's Alpha stability) is one a configuration may
    use only when the picker runs with ``--allow-experimental-plugins``; the loader checks it. A
    type registered ``default_for`` a data key (upstream's ``RegisterAsDefaultProducer``, the key's
    ``<attribute>/<producer>`` id) is what the loader adds, under its type name, to a configuration
    that reads that key and declares no producer of it.
    A *deferred* type (an installed distribution's, ``config.installed_plugins``) is known by name
    only until :meth:`load` first asks for it: its ``load`` callback then imports it and registers
    it here, so only the types a configuration names are ever imported.
    """

    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}
        self._experimental: set[str] = set()
        self._default_producers: dict[str, str] = {}
        self._refused: dict[str, str] = {}
        self._deferred: dict[str, Callable[[PluginRegistry], None]] = {}

    def register(
        self, type_name: str, factory: PluginFactory, *, experimental: bool = False, default_for: str = ""
    ) -> None:
        if type_name in self._factories or type_name in self._deferred:
            raise ValueError(f"plugin type {type_name!r} registered twice")
        self._factories[type_name] = factory
        if experimental:
            self._experimental.add(type_name)
        if default_for:
            self._default_producers[default_for] = type_name

    def refuse(self, type_name: str, reason: str) -> None:
        """Know ``type_name`` only to refuse it: a configuration naming it fails at load with ``reason``."""

        def refused(name: str, parameters: Mapping[str, Any], context: PluginContext) -> Plugin:
            raise RefusedTypeError(f"{type_name} is not supported by this picker: {reason}")

        self.register(type_name, refused)
        self._refused[type_name] = reason

    def refusal(self, type_name: str) -> str | None:
        """Why ``type_name`` is refused; None for a type that works (or is unknown)."""
        return self._refused.get(type_name)

    def default_producer(self, data_key: str) -> str | None:
        """The type registered as the default producer of ``data_key`` (an ``<attribute>/<producer>`` id)."""
        return self._default_producers.get(data_key)

    def defer(self, type_name: str, load: Callable[[PluginRegistry], None]) -> None:
        """Know ``type_name`` now; ``load(self)`` registers it, or raises :class:`PluginConfigError`, when it is
        first needed (:meth:`load`). A type this picker only refuses (:meth:`refuse`) is replaced: an installed
        distribution may provide an upstream type that has no in-tree plugin."""
        if self._refused.pop(type_name, None) is not None:
            del self._factories[type_name]
        if type_name in self._factories or type_name in self._deferred:
            raise ValueError(f"plugin type {type_name!r} registered twice")
        self._deferred[type_name] = load

    def load(self, type_name: str) -> None:
        """Make a deferred ``type_name`` usable (a no-op for any other); a failure is raised again on every call."""
        load = self._deferred.pop(type_name, None)  # popped first: register() refuses a name still deferred
        if load is None:
            return
        try:
            load(self)
        except BaseException:
            self._deferred[type_name] = load
            raise

    def is_experimental(self, type_name: str) -> bool:
        self.load(type_name)
        return type_name in self._experimental

    def types(self) -> Iterable[str]:
        """Every registered type name, refused and deferred ones included (they are known, by name)."""
        return sorted({*self._factories, *self._deferred})

    def create(self, type_name: str, name: str, parameters: Mapping[str, Any], context: PluginContext) -> Plugin:
        self.load(type_name)
        factory = self._factories.get(type_name)
        if factory is None:
            known = ", ".join(self.types())
            raise PluginConfigError(f"unknown plugin type {type_name!r} (known: {known})")
        return factory(name, parameters, context)
