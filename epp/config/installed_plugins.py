"""Plugin types of installed distributions: found through the ``epp.plugins`` entry-point group, imported on demand.

A distribution adds plugin types by declaring entry points in the ``epp.plugins`` group, each
named by the type name configurations use and pointing at an
:class:`~epp.plugin_api.PluginDefinition` (docs/plugins.md)::

    [project.entry-points."epp.plugins"]
    zone-affinity-filter = "epp_zone_example.zone:ZONE_AFFINITY_FILTER"

:func:`discover` reads only the installed distributions' metadata (no plugin code runs) and
registers each type *deferred* on the picker's registry, beside the in-tree types. A type name
that clashes with an in-tree type or with another distribution's is refused there, naming both
distributions, so the picker does not start with an ambiguous name. The first configuration that
names a type imports it (:meth:`PluginRegistry.load`), and only then: the definition must be a
``PluginDefinition`` of the entry point's name, built for a compatible plugin API
(:func:`~epp.plugin_api.api_version_compatible`); any failure (an import error, a wrong object,
an incompatible version) is a :class:`PluginConfigError` naming the type, its distribution and,
for a version, both versions, which refuses that configuration (at start, or a reload, which keeps
the last good one). Its factory is checked as it runs: an exception that is not a
``PluginConfigError``, or an object without the type's ``typed_name`` or without a declared kind,
is refused the same way. ``--allow-experimental-plugins`` applies to a definition marked
``experimental``. :func:`listing` is ``epp serve --list-plugins``.

Importing a module is file I/O and runs its code: the loader imports a type while it loads a
configuration (``config/validation.py``), and the runtime loads every configuration on a worker
thread (``pool_runtime.PoolConfigLoader``, at start and on every reload), so no import runs on the
event loop.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import Distribution, EntryPoint, distributions
from typing import Any

from epp import __version__
from epp.framework.plugin import Plugin, PluginConfigError, PluginContext, PluginFactory, PluginRegistry, declared_kinds
from epp.plugin_api import API_VERSION, PluginDefinition, api_version_compatible

__all__ = [
    "ENTRY_POINT_GROUP",
    "IN_TREE",
    "InstalledPlugin",
    "InstalledPlugins",
    "ListedPlugin",
    "PluginClashError",
    "discover",
    "listing",
]

ENTRY_POINT_GROUP = "epp.plugins"
IN_TREE = f"epp {__version__} (in-tree)"


class PluginClashError(ValueError):
    """Two sources register one plugin type name; the message names both distributions."""


@dataclass(frozen=True, slots=True)
class InstalledPlugin:
    """One entry point of the group: a type name, where it comes from and what it points at."""

    type_name: str
    distribution: str
    version: str
    entry_point: EntryPoint

    @property
    def origin(self) -> str:
        """``<distribution> <version> (<module>:<attribute>)``: what errors and the listing name."""
        return f"{self.distribution} {self.version} ({self.entry_point.value})"


@dataclass(slots=True)
class InstalledPlugins:
    """The installed types :func:`discover` registered, and the definitions of those loaded so far."""

    plugins: Mapping[str, InstalledPlugin]
    definitions: dict[str, PluginDefinition] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ListedPlugin:
    """A row of ``--list-plugins``."""

    type_name: str
    origin: str
    experimental: bool
    note: str = ""


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _installed(dists: Iterable[Distribution]) -> list[InstalledPlugin]:
    """The group's entry points, one distribution per normalised name (the first on the path, as imports do)."""
    seen: set[str] = set()
    found: list[InstalledPlugin] = []
    for dist in dists:
        name = dist.metadata["Name"] or "?"
        key = _normalized(name)
        if key in seen:
            continue
        seen.add(key)
        for entry_point in dist.entry_points.select(group=ENTRY_POINT_GROUP):
            found.append(InstalledPlugin(entry_point.name, name, dist.version, entry_point))
    return found


def discover(registry: PluginRegistry, dists: Iterable[Distribution] | None = None) -> InstalledPlugins:
    """Register every installed plugin type on ``registry``, deferred (nothing is imported); raises
    :class:`PluginClashError` when a type name is taken. ``dists``: where to look (default: ``sys.path``)."""
    in_tree = {name for name in registry.types() if registry.refusal(name) is None}  # a refused type may be provided
    taken: dict[str, InstalledPlugin] = {}
    for plugin in _installed(distributions() if dists is None else dists):
        name = plugin.type_name
        if name in in_tree:
            raise PluginClashError(
                f"plugin type {name!r} of {plugin.origin} clashes with the in-tree type of {IN_TREE}; "
                "the picker refuses ambiguous type names (uninstall the distribution or rename the type)"
            )
        other = taken.get(name)
        if other is not None:
            raise PluginClashError(
                f"plugin type {name!r} is registered by two installed distributions, {other.origin} and "
                f"{plugin.origin}; the picker refuses ambiguous type names (uninstall one)"
            )
        taken[name] = plugin
    installed = InstalledPlugins(taken)
    for name, plugin in taken.items():
        registry.defer(name, _loader(plugin, installed))
    return installed


def _loader(plugin: InstalledPlugin, installed: InstalledPlugins) -> Callable[[PluginRegistry], None]:
    def load(registry: PluginRegistry) -> None:
        definition = _definition(plugin)
        registry.register(plugin.type_name, _checked(plugin, definition.factory), experimental=definition.experimental)
        installed.definitions[plugin.type_name] = definition

    return load


def _definition(plugin: InstalledPlugin) -> PluginDefinition:
    """Import the entry point and check what it names; PluginConfigError naming the plugin otherwise."""
    where = f"plugin type {plugin.type_name!r} of {plugin.origin}"
    try:
        target = plugin.entry_point.load()
    except Exception as exc:  # anything the import raises: the plugin's problem, refused with its name
        raise PluginConfigError(f"{where} cannot be imported: {type(exc).__name__}: {exc}") from exc
    if not isinstance(target, PluginDefinition):
        raise PluginConfigError(f"{where} names a {type(target).__name__}, not an epp.plugin_api.PluginDefinition")
    if target.type_name != plugin.type_name:
        raise PluginConfigError(
            f"{where} names the definition of type {target.type_name!r}: the entry point's name must be the type name"
        )
    if not api_version_compatible(target.api_version):
        raise PluginConfigError(
            f"{where} was built for epp plugin API {target.api_version}; this picker provides {API_VERSION} "
            "(a plugin loads when the major versions are equal and its minor version is not newer)"
        )
    return target


def _checked(plugin: InstalledPlugin, factory: PluginFactory) -> PluginFactory:
    """``factory``, refusing with a PluginConfigError what an in-tree factory is trusted not to do."""
    where = f"plugin type {plugin.type_name!r} of {plugin.origin}"

    def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> Plugin:
        try:
            made = factory(name, parameters, context)
        except PluginConfigError:
            raise
        except Exception as exc:  # a factory bug: the configuration is refused, the picker goes on
            raise PluginConfigError(f"the factory of {where} failed: {type(exc).__name__}: {exc}") from exc
        typed_name = getattr(made, "typed_name", None)
        if typed_name is None or (typed_name.type, typed_name.name) != (plugin.type_name, name):
            raise PluginConfigError(
                f"the factory of {where} made an object whose typed_name is {typed_name!r}, not "
                f"{name}/{plugin.type_name} (subclass NamedPlugin with plugin_type = {plugin.type_name!r} "
                "and pass the name on)"
            )
        if not declared_kinds(made):
            raise PluginConfigError(
                f"the factory of {where} made a plugin that declares no kind (set kinds = frozenset({{PluginKind...}}))"
            )
        return made

    return create


def listing(registry: PluginRegistry, installed: InstalledPlugins) -> list[ListedPlugin]:
    """Every type on ``registry``: in-tree ones, then installed ones, each imported to say whether it loads."""
    rows = [
        ListedPlugin(name, IN_TREE, registry.is_experimental(name), _refused_note(registry.refusal(name)))
        for name in registry.types()
        if name not in installed.plugins
    ]
    for name, plugin in sorted(installed.plugins.items()):
        try:
            experimental = registry.is_experimental(name)
        except PluginConfigError as exc:
            rows.append(ListedPlugin(name, plugin.origin, False, f"refused: {exc}"))
            continue
        built_for = installed.definitions[name].api_version
        rows.append(ListedPlugin(name, plugin.origin, experimental, f"plugin API {built_for}"))
    return rows


def _refused_note(reason: str | None) -> str:
    """An upstream type known only to be refused (``epp.plugins.refused``): why, in its row."""
    return f"refused: {reason}" if reason else ""
