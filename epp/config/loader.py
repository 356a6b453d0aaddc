"""EndpointPickerConfig → a running scheduler: decode, default, validate, instantiate.

Stages (upstream ``pkg/epp/config/loader``):

1. decode (``picker_config.decode_config``): strict YAML, unknown fields are errors;
2. static checks: feature gates known, plugin names unique (a name defaults to its type), types
   registered, profile names unique, profile references defined;
3. instantiate every plugin through the registry (factories validate their parameters);
4. system defaults (upstream ``applySystemDefaults``): a "default" profile holding every
   filter, scorer and picker when no profile is given; ``single-profile-handler`` when there is
   one profile and no handler; the first declared picker (else a new ``max-score-picker``) in
   every profile without one; weight 1.0 for scorers without a weight; ``utilization-detector``
   as the saturation detector when none is named;
5. graph checks: exactly one profile handler (``single-profile-handler`` ⇒ exactly one
   profile), every profile entry a filter, scorer or picker, exactly one picker per profile, the
   saturation detector, parser and data-layer references defined and of the right kind;
6. build the :class:`~epp.scheduling.scheduler.Scheduler` and collect PreRequest/PostResponse
   plugins into an immutable :class:`LoadedConfig`.

Every failure is a :class:`ConfigError` naming the field path and the value.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from epp.config.defaults import (
    DEFAULT_PICKER_TYPE,
    DEFAULT_PROFILE_HANDLER_TYPE,
    DEFAULT_PROFILE_NAME,
    DEFAULT_SATURATION_DETECTOR_TYPE,
    DEFAULT_SCORER_WEIGHT,
    default_config,
)
from epp.config.picker_config import (
    ConfigError,
    EndpointPickerConfig,
    PluginRef,
    PluginSpec,
    SchedulingPlugin,
    SchedulingProfile,
    decode_config,
)
from epp.framework.plugin import Plugin, PluginContext, PluginRegistry
from epp.framework.saturation import SaturationDetector
from epp.framework.scheduling import (
    EndpointsObserver,
    Filter,
    Picker,
    PostResponse,
    PreRequest,
    ProfileHandler,
    ResponseHeaderContributor,
    Scorer,
)
from epp.scheduling.profile import SchedulerProfile, WeightedScorer
from epp.scheduling.scheduler import Scheduler
from epp.telemetry.metrics import EppMetrics

__all__ = [
    "FEATURE_GATES",
    "ConfigError",
    "LoadedConfig",
    "build_config",
    "load_config",
    "load_default_config",
]

FEATURE_GATES = frozenset({"flowControl", "enableLegacyMetrics", "dataLayer"})
"""Known ``featureGates`` (``dataLayer`` is a deprecated no-op upstream)."""


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A validated config and everything built from it; replaced whole on reload, never mutated."""

    config: EndpointPickerConfig
    """The effective config, with every default the loader injected."""
    plugins: Mapping[str, Plugin]
    scheduler: Scheduler
    saturation_detector: SaturationDetector
    pre_request: tuple[PreRequest, ...]
    post_response: tuple[PostResponse, ...]
    response_headers: tuple[ResponseHeaderContributor, ...] = ()
    """Plugins that add headers to the client's response (session affinity)."""
    endpoint_observers: tuple[EndpointsObserver, ...] = ()
    """Plugins with per-endpoint state to free when endpoints leave the pool (prefix index)."""

    @property
    def feature_gates(self) -> frozenset[str]:
        return frozenset(self.config.feature_gates)


def load_config(
    text: str, registry: PluginRegistry, context: PluginContext, *, metrics: EppMetrics | None = None
) -> LoadedConfig:
    """Decode ``text`` (YAML or JSON) and build it; raises :class:`ConfigError`."""
    return build_config(decode_config(text), registry, context, metrics=metrics)


def load_default_config(
    registry: PluginRegistry, context: PluginContext, *, metrics: EppMetrics | None = None
) -> LoadedConfig:
    """The default profile (``config/defaults.py``), built."""
    return build_config(default_config(), registry, context, metrics=metrics)


def build_config(
    config: EndpointPickerConfig,
    registry: PluginRegistry,
    context: PluginContext,
    *,
    metrics: EppMetrics | None = None,
) -> LoadedConfig:
    """Default, validate and instantiate an already decoded config; raises :class:`ConfigError`."""
    config = config.model_copy(update={"plugins": tuple(_named(p) for p in config.plugins)})
    _check_static(config, registry)
    builder = _Builder(config, registry, context)
    builder.apply_system_defaults()
    return builder.build(metrics)


def _named(spec: PluginSpec) -> PluginSpec:
    return spec if spec.name else spec.model_copy(update={"name": spec.type})


def _check_static(config: EndpointPickerConfig, registry: PluginRegistry) -> None:
    for i, gate in enumerate(config.feature_gates):
        if gate not in FEATURE_GATES:
            raise ConfigError(f"featureGates[{i}]: unknown feature gate {gate!r} (known: {sorted(FEATURE_GATES)})")
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


class _Builder:
    """Holds the config being defaulted and the plugin instances made so far."""

    def __init__(self, config: EndpointPickerConfig, registry: PluginRegistry, context: PluginContext) -> None:
        self.config = config
        self._registry = registry
        self._context = context
        self.plugins: dict[str, Plugin] = {}
        for i, spec in enumerate(config.plugins):
            self.plugins[spec.name] = self._create(spec, f"plugins[{i}]")

    def _create(self, spec: PluginSpec, where: str) -> Plugin:
        parameters = MappingProxyType(dict(spec.parameters or {}))
        try:
            return self._registry.create(spec.type, spec.name, parameters, self._context)
        except ValueError as exc:  # PluginConfigError and factories' own range checks
            raise ConfigError(f"{where} ({spec.name!r}, type {spec.type!r}).parameters: {exc}") from exc

    def _add_default_plugin(self, type_name: str) -> str:
        """Instantiate ``type_name`` with default parameters under its type name; returns the name."""
        if type_name in self.plugins:
            existing = self.plugins[type_name].typed_name.type
            raise ConfigError(
                f"plugins: the default {type_name!r} plugin cannot be added, the name is taken by a {existing!r} plugin"
            )
        spec = PluginSpec(name=type_name, type=type_name)
        self.plugins[type_name] = self._create(spec, "(system default)")
        self.config = self.config.model_copy(update={"plugins": (*self.config.plugins, spec)})
        return type_name

    def apply_system_defaults(self) -> None:
        plugins = self.plugins
        profiles = self.config.scheduling_profiles
        if not profiles:
            refs = tuple(
                SchedulingPlugin(plugin_ref=name)
                for name, p in plugins.items()
                if isinstance(p, Filter | Scorer | Picker)
            )
            profiles = (SchedulingProfile(name=DEFAULT_PROFILE_NAME, plugins=refs),)
        if len(profiles) == 1 and not any(isinstance(p, ProfileHandler) for p in plugins.values()):
            self._add_default_plugin(DEFAULT_PROFILE_HANDLER_TYPE)

        default_picker = next((name for name, p in plugins.items() if isinstance(p, Picker)), None)
        defaulted: list[SchedulingProfile] = []
        for profile in profiles:
            refs_out: list[SchedulingPlugin] = []
            has_picker = False
            for ref in profile.plugins:
                plugin = plugins[ref.plugin_ref]
                has_picker = has_picker or isinstance(plugin, Picker)
                if ref.weight is None and isinstance(plugin, Scorer):
                    ref = ref.model_copy(update={"weight": DEFAULT_SCORER_WEIGHT})
                refs_out.append(ref)
            if not has_picker:
                if default_picker is None:
                    default_picker = self._add_default_plugin(DEFAULT_PICKER_TYPE)
                refs_out.append(SchedulingPlugin(plugin_ref=default_picker))
            defaulted.append(profile.model_copy(update={"plugins": tuple(refs_out)}))
        update: dict[str, object] = {"scheduling_profiles": tuple(defaulted)}

        if self.config.saturation_detector is None:
            name = DEFAULT_SATURATION_DETECTOR_TYPE
            if name not in plugins:
                self._add_default_plugin(DEFAULT_SATURATION_DETECTOR_TYPE)
            update["saturation_detector"] = PluginRef(plugin_ref=name)
        self.config = self.config.model_copy(update=update)

    def _ref(self, where: str, ref: str) -> Plugin:
        plugin = self.plugins.get(ref)
        if plugin is None:
            raise ConfigError(f"{where}: references undefined plugin {ref!r}")
        return plugin

    def build(self, metrics: EppMetrics | None) -> LoadedConfig:
        config, plugins = self.config, self.plugins
        handlers = [p for p in plugins.values() if isinstance(p, ProfileHandler)]
        if len(handlers) > 1:
            names = sorted(h.typed_name.name for h in handlers)
            raise ConfigError(f"plugins: at most one profile handler is allowed, got {names}")
        if not handlers:
            raise ConfigError(
                f"plugins: {len(config.scheduling_profiles)} scheduling profiles need a profile handler plugin"
            )
        handler = handlers[0]
        if handler.typed_name.type == DEFAULT_PROFILE_HANDLER_TYPE and len(config.scheduling_profiles) != 1:
            raise ConfigError(
                f"schedulingProfiles: {handler.typed_name.type} allows exactly one profile, "
                f"got {len(config.scheduling_profiles)}"
            )

        profiles: dict[str, SchedulerProfile] = {}
        for i, spec in enumerate(config.scheduling_profiles):
            profiles[spec.name] = self._build_profile(i, spec, metrics)

        detector_ref = config.saturation_detector
        detector_name = detector_ref.plugin_ref if detector_ref is not None else DEFAULT_SATURATION_DETECTOR_TYPE
        detector = self._ref("saturationDetector.pluginRef", detector_name)
        if not isinstance(detector, SaturationDetector):
            raise ConfigError(
                f"saturationDetector.pluginRef: plugin {detector_name!r} "
                f"(type {detector.typed_name.type!r}) is not a saturation detector"
            )
        if config.parser is not None:
            self._ref("parser.pluginRef", config.parser.plugin_ref)
        if config.data_layer is not None:
            for i, source in enumerate(config.data_layer.sources):
                self._ref(f"dataLayer.sources[{i}].pluginRef", source.plugin_ref)
                for j, extractor in enumerate(source.extractors):
                    self._ref(f"dataLayer.sources[{i}].extractors[{j}].pluginRef", extractor.plugin_ref)

        return LoadedConfig(
            config=config,
            plugins=MappingProxyType(dict(plugins)),
            scheduler=Scheduler(profile_handler=handler, profiles=profiles, metrics=metrics),
            saturation_detector=detector,
            pre_request=tuple(p for p in plugins.values() if isinstance(p, PreRequest)),
            post_response=tuple(p for p in plugins.values() if isinstance(p, PostResponse)),
            response_headers=tuple(p for p in plugins.values() if isinstance(p, ResponseHeaderContributor)),
            endpoint_observers=tuple(p for p in plugins.values() if isinstance(p, EndpointsObserver)),
        )

    def _build_profile(self, index: int, spec: SchedulingProfile, metrics: EppMetrics | None) -> SchedulerProfile:
        filters: list[Filter] = []
        scorers: list[WeightedScorer] = []
        pickers: list[Picker] = []
        for j, ref in enumerate(spec.plugins):
            where = f"schedulingProfiles[{index}].plugins[{j}]"
            plugin = self._ref(f"{where}.pluginRef", ref.plugin_ref)
            if not isinstance(plugin, Filter | Scorer | Picker):
                raise ConfigError(
                    f"{where}.pluginRef: plugin {ref.plugin_ref!r} (type {plugin.typed_name.type!r}) "
                    "is not a filter, scorer or picker"
                )
            if isinstance(plugin, Filter):
                filters.append(plugin)
            if isinstance(plugin, Scorer):
                weight = DEFAULT_SCORER_WEIGHT if ref.weight is None else ref.weight
                scorers.append(WeightedScorer(plugin, weight))
            if isinstance(plugin, Picker):
                pickers.append(plugin)
        if len(pickers) != 1:
            names = [p.typed_name.name for p in pickers]
            raise ConfigError(
                f"schedulingProfiles[{index}] ({spec.name!r}): exactly one picker is required, got {names}"
            )
        return SchedulerProfile(spec.name, filters=filters, scorers=scorers, picker=pickers[0], metrics=metrics)
