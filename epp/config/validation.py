"""The checks an EndpointPickerConfig must pass before any plugin is made (upstream ``loader/validation.go``).

Static, on the decoded file alone: plugin names unique (a name defaults to its type), types
registered (an installed distribution's type is imported here, the first time a configuration
names it: ``installed_plugins``), profile names unique, every profile reference defined and none twice in a profile;
and (upstream ``ValidatePluginStability``) no experimental (Alpha) type unless the picker runs with
``--allow-experimental-plugins``. The graph checks that need the plugins (kinds, one picker per
profile, the saturation detector) are the loader's, after instantiation.
"""

from __future__ import annotations

from epp.config.picker_config import ConfigError, EndpointPickerConfig
from epp.framework.plugin import PluginConfigError, PluginRegistry

__all__ = ["check_stability", "check_static"]


def check_static(config: EndpointPickerConfig, registry: PluginRegistry) -> None:
    """Names, types and profile references; raises :class:`ConfigError` naming the field."""
    known_types = set(registry.types())
    names: dict[str, int] = {}
    for i, spec in enumerate(config.plugins):
        if spec.name in names:
            raise ConfigError(
                f"plugins[{i}].name: duplicate plugin name {spec.name!r} (also plugins[{names[spec.name]}])"
            )
        names[spec.name] = i
        if spec.type not in known_types:
            raise ConfigError(f"plugins[{i}].type: unknown plugin type {spec.type!r} (known: {sorted(known_types)})")
        try:  # an installed distribution's type is imported now, when a configuration first names it
            registry.load(spec.type)
        except PluginConfigError as exc:
            raise ConfigError(f"plugins[{i}] ({spec.name!r}, type {spec.type!r}): {exc}") from exc
    profiles: dict[str, int] = {}
    for i, profile in enumerate(config.scheduling_profiles):
        if profile.name in profiles:
            raise ConfigError(f"schedulingProfiles[{i}].name: duplicate profile name {profile.name!r}")
        profiles[profile.name] = i
        refs: set[str] = set()
        for j, ref in enumerate(profile.plugins):
            where = f"schedulingProfiles[{i}].plugins[{j}].pluginRef"
            if ref.plugin_ref not in names:
                raise ConfigError(f"{where}: references undefined plugin {ref.plugin_ref!r}")
            if ref.plugin_ref in refs:
                raise ConfigError(f"{where}: plugin {ref.plugin_ref!r} referenced twice in profile {profile.name!r}")
            refs.add(ref.plugin_ref)


def check_stability(config: EndpointPickerConfig, registry: PluginRegistry) -> None:
    """An experimental (Alpha) type needs ``--allow-experimental-plugins``."""
    for i, spec in enumerate(config.plugins):
        if registry.is_experimental(spec.type):
            raise ConfigError(
                f"plugins[{i}] ({spec.name!r}, type {spec.type!r}): an experimental (Alpha) plugin; "
                "start the picker with --allow-experimental-plugins to use it"
            )
