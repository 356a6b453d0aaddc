"""EndpointPickerConfig → a running scheduler: decode, default, validate, instantiate.

Loading is pure: it reads the files the configuration names (tokenizers, certificates) and makes
plugin instances, but starts nothing, publishes no metric and logs nothing, so the runtime runs it
on a worker thread and may throw the result away (a refused reload). What a configuration starts
(subscribers, clients, the plugins' metric series) starts when the runtime puts it in force
(``PoolRouting.apply``), and its notices are published then (``compat.publish_notices``).

Stages (upstream ``pkg/epp/config/loader``):

1. decode (``picker_config.decode_config``): strict YAML, unknown fields are errors; then the
   llm-d spelling (``compat.normalized``: deprecated keys copied to their new places);
2. static checks: feature gates known (``compat.feature_gates``), then ``validation.py``: plugin
   names unique (a name defaults to its type), types registered (an installed distribution's type
   is imported here, ``installed_plugins``), profile names unique, profile references defined; no
   experimental (upstream Alpha) type unless ``--allow-experimental-plugins``;
3. instantiate every plugin through the registry (factories validate their parameters);
4. system defaults (upstream ``applySystemDefaults``): a "default" profile holding every
   filter, scorer and picker when no profile is given; ``single-profile-handler`` when there is
   one profile and no handler; the first declared picker (else a new ``max-score-picker``) in
   every profile without one; weight 1.0 for scorers without a weight; ``utilization-detector``
   as the saturation detector when none is named (for admission unless every profile sheds by
   itself, as the v0.3 tree does: such a configuration has no admission step, as v0.3 had none,
   until it names a saturation detector); the default metrics source and extractor in
   ``dataLayer`` unless the section opts out or lists a source (``data_layer.default_sources``);
5. graph checks: exactly one profile handler (``single-profile-handler`` ⇒ exactly one
   profile), every profile entry a filter, scorer or picker, exactly one picker per profile, the
   saturation detector, parser and data-layer references defined and of the right kind;
6. build the :class:`~epp.scheduling.scheduler.Scheduler`, the scrape spec (the wired metrics
   source and extractor over GIE's ``--model-server-metrics-*`` flags: ``data_layer.data_layer_scrape``)
   and collect PreRequest/PostResponse plugins into an immutable :class:`LoadedConfig`, with the
   config's notices (deprecated spellings, settings this picker runs without:
   ``compat.ignored_settings``, data-layer settings without effect), which the runtime logs and
   counts in ``epp_config_ignored_settings`` once the configuration is in force.

Every failure is a :class:`ConfigError` naming the field path and the value.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from epp.config.compat import ConfigNotice, feature_gates, ignored_settings, normalized
from epp.config.data_graph import DataGraph, resolve_data
from epp.config.data_layer import ScrapeBuilder, data_layer_scrape, default_sources, discovery_plugin
from epp.config.defaults import (
    DEFAULT_PICKER_TYPE,
    DEFAULT_PROFILE_HANDLER_TYPE,
    DEFAULT_PROFILE_NAME,
    DEFAULT_SATURATION_DETECTOR_TYPE,
    DEFAULT_SCORER_WEIGHT,
    default_config,
)
from epp.config.flow_control import FlowControlSettings, flow_control_settings
from epp.config.kinds import check_declared_kinds, playing, plays
from epp.config.picker_config import (
    ConfigError,
    EndpointPickerConfig,
    FlowControlConfig,
    PluginRef,
    PluginSpec,
    RequestHandlerConfig,
    SaturationDetectorRef,
    SchedulingPlugin,
    SchedulingProfile,
    decode_config,
)
from epp.config.validation import check_stability, check_static
from epp.framework.data import DataScope
from epp.framework.datalayer import ScrapeSpec
from epp.framework.discovery import EndpointDiscovery
from epp.framework.measures import Measured
from epp.framework.parsing import Parser, ParserTable
from epp.framework.plugin import Plugin, PluginContext, PluginKind, PluginRegistry, RefusedTypeError
from epp.framework.producers import AsyncClosable, DataProducer, EndpointsAddedObserver, PluginReferrer
from epp.framework.saturation import SaturationDetector, SelfAdmitting
from epp.framework.scheduling import (
    EndpointsObserver,
    Filter,
    InFlightEstimator,
    Picker,
    PostResponse,
    PreRequest,
    ProfileHandler,
    ResponseHeaderContributor,
    Scorer,
)
from epp.plugins.inflight_load import InFlightLoadProducer
from epp.plugins.parsers import DEFAULT_PARSER_TYPES
from epp.scheduling.profile import SchedulerProfile, WeightedScorer
from epp.scheduling.scheduler import Scheduler

__all__ = [
    "ConfigError",
    "LoadedConfig",
    "build_config",
    "load_config",
    "load_default_config",
]


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    """A validated config and everything built from it; replaced whole on reload, never mutated."""

    config: EndpointPickerConfig
    """The effective config, with every default the loader injected."""
    plugins: Mapping[str, Plugin]
    scheduler: Scheduler
    """Without metrics: the pipeline that puts this config in force binds it to the plugins' series."""
    saturation_detector: SaturationDetector
    pre_request: tuple[PreRequest, ...]
    post_response: tuple[PostResponse, ...]
    response_headers: tuple[ResponseHeaderContributor, ...] = ()
    """Plugins that add headers to the client's response (session affinity)."""
    endpoint_observers: tuple[EndpointsObserver, ...] = ()
    """Plugins with per-endpoint state to free when endpoints leave the pool (prefix index)."""
    endpoints_added: tuple[EndpointsAddedObserver, ...] = ()
    """Plugins told of every endpoint that joins (and, once the config is in force, of those present)."""
    data_producers: tuple[DataProducer, ...] = ()
    """Awaited, in config order, before each request's scheduling cycle (``token-producer``)."""
    closables: tuple[AsyncClosable, ...] = ()
    """Plugins holding background resources, closed when this config is replaced or the picker stops."""
    measured: tuple[Measured, ...] = ()
    """Plugins that report what they measure (prefix index sizes, KV events), for /metrics and the epp.v1 API."""
    admission: bool = True
    """Whether the pipeline sheds sheddable work on ``saturation_detector`` before scheduling:
    False when every profile runs a filter that sheds by itself (the v0.3 tree) and the config
    names no saturation detector."""
    feature_gates: frozenset[str] = frozenset()
    """The gates that are on, named or by their upstream default."""
    notices: tuple[ConfigNotice, ...] = ()
    """What the operator should know: deprecated spellings, settings without effect here (the runtime
    logs and counts them once this config is in force)."""
    scrape: ScrapeSpec | None = None
    """What the scrapers fetch and how they read it (the data layer, over GIE's scraping flags);
    None when the caller gave no scrape builder (it runs no scrapers)."""
    parsers: ParserTable = field(default_factory=lambda: ParserTable(()))
    """Request path → API, from ``requestHandler.parsers`` (upstream's four when none are listed)."""
    in_flight: InFlightEstimator = field(default_factory=InFlightLoadProducer)
    """Each routed request's in-flight token estimate: the ``inflight-load-producer`` declared, else its defaults."""
    flow_control: FlowControlSettings | None = None
    """The queue's settings when the ``flowControl`` gate is on (requests then queue instead of
    being shed); None without the gate."""
    data_scopes: tuple[DataScope, ...] = ()
    """The scope of every plugin that reads or writes request data (``config.data_graph``)."""
    discovery: EndpointDiscovery | None = None
    """``dataLayer.discovery``'s plugin: the picker then runs without Kubernetes (None: it does not)."""


def load_config(
    text: str,
    registry: PluginRegistry,
    context: PluginContext,
    *,
    allow_experimental_plugins: bool = False,
    build_scrape: ScrapeBuilder | None = None,
) -> LoadedConfig:
    """Decode ``text`` (YAML or JSON) and build it; raises :class:`ConfigError`."""
    return build_config(
        decode_config(text),
        registry,
        context,
        allow_experimental_plugins=allow_experimental_plugins,
        build_scrape=build_scrape,
    )


def load_default_config(
    registry: PluginRegistry,
    context: PluginContext,
    *,
    build_scrape: ScrapeBuilder | None = None,
) -> LoadedConfig:
    """The default profile (``config/defaults.py``), built."""
    return build_config(default_config(), registry, context, build_scrape=build_scrape)


def build_config(
    config: EndpointPickerConfig,
    registry: PluginRegistry,
    context: PluginContext,
    *,
    allow_experimental_plugins: bool = False,
    build_scrape: ScrapeBuilder | None = None,
) -> LoadedConfig:
    """Default, validate and instantiate an already decoded config; raises :class:`ConfigError`.

    ``build_scrape`` makes :attr:`LoadedConfig.scrape` from the wired data layer (the runtime's
    puts GIE's scraping flags under it); without it the data layer is only checked.
    """
    config, notices = normalized(config)
    config = config.model_copy(update={"plugins": tuple(_named(p) for p in config.plugins)})
    gates = feature_gates(config)
    check_static(config, registry)
    if not allow_experimental_plugins:
        check_stability(config, registry)
    builder = _Builder(config, registry, context)
    builder.apply_system_defaults()
    graph = builder.resolve_data()
    flow_control = builder.flow_control() if gates["flowControl"] else None
    loaded = builder.build(build_scrape)
    notices += ignored_settings(config, gates, {p.name: p.type for p in config.plugins})
    notices += loaded.notices
    return dataclasses.replace(
        loaded,
        feature_gates=frozenset(g for g, on in gates.items() if on),
        notices=tuple(notices),
        flow_control=flow_control,
        data_producers=graph.ordered(loaded.data_producers),
        data_scopes=graph.scopes,
    )


def _named(spec: PluginSpec) -> PluginSpec:
    return spec if spec.name else spec.model_copy(update={"name": spec.type})


class _Builder:
    """Holds the config being defaulted and the plugin instances made so far."""

    def __init__(self, config: EndpointPickerConfig, registry: PluginRegistry, context: PluginContext) -> None:
        self.config = config
        detector = config.flow_control.saturation_detector if config.flow_control is not None else None
        self._detector_named = detector is not None
        self._detector_where = (  # the key the file used, for error messages
            "saturationDetector.pluginRef"
            if detector is not None and detector is config.saturation_detector
            else "flowControl.saturationDetector.pluginRef"
        )
        self._registry = registry
        self._context = context
        self.plugins: dict[str, Plugin] = {}
        for i, spec in enumerate(config.plugins):
            self.plugins[spec.name] = self._create(spec, f"plugins[{i}]")

    def _create(self, spec: PluginSpec, where: str) -> Plugin:
        parameters = MappingProxyType(dict(spec.parameters or {}))
        try:
            plugin = self._registry.create(spec.type, spec.name, parameters, self._context)
        except RefusedTypeError as exc:
            raise ConfigError(f"{where} ({spec.name!r}, type {spec.type!r}): {exc}") from exc
        except ValueError as exc:  # PluginConfigError and factories' own range checks
            raise ConfigError(f"{where} ({spec.name!r}, type {spec.type!r}).parameters: {exc}") from exc
        check_declared_kinds(plugin, where)
        return plugin

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

    def _default_plugin(self, type_name: str) -> str:
        """The plugin named ``type_name`` if declared, else a new one with default parameters."""
        return type_name if type_name in self.plugins else self._add_default_plugin(type_name)

    def flow_control(self) -> FlowControlSettings:
        """The ``flowControl`` section (gate on), with its default policies declared."""
        section = self.config.flow_control or FlowControlConfig()
        return flow_control_settings(section, self._ref, self._default_plugin)

    def apply_system_defaults(self) -> None:
        plugins = self.plugins
        profiles = self.config.scheduling_profiles
        if not profiles:
            refs = tuple(
                SchedulingPlugin(plugin_ref=name)
                for name, p in plugins.items()
                if plays(p, PluginKind.FILTER) or plays(p, PluginKind.SCORER) or plays(p, PluginKind.PICKER)
            )
            profiles = (SchedulingProfile(name=DEFAULT_PROFILE_NAME, plugins=refs),)
        if len(profiles) == 1 and not playing(plugins.values(), PluginKind.PROFILE_HANDLER):
            self._add_default_plugin(DEFAULT_PROFILE_HANDLER_TYPE)

        # Only a plugin whose type declares the Picker kind: a flow-control fairness policy also has a
        # ``pick`` method, and must never be taken for a profile's picker.
        default_picker = next((name for name, p in plugins.items() if plays(p, PluginKind.PICKER)), None)
        defaulted: list[SchedulingProfile] = []
        for profile in profiles:
            refs_out: list[SchedulingPlugin] = []
            has_picker = False
            for ref in profile.plugins:
                plugin = plugins[ref.plugin_ref]
                has_picker = has_picker or plays(plugin, PluginKind.PICKER)
                if ref.weight is None and plays(plugin, PluginKind.SCORER):
                    ref = ref.model_copy(update={"weight": DEFAULT_SCORER_WEIGHT})
                refs_out.append(ref)
            if not has_picker:
                if default_picker is None:
                    default_picker = self._add_default_plugin(DEFAULT_PICKER_TYPE)
                refs_out.append(SchedulingPlugin(plugin_ref=default_picker))
            defaulted.append(profile.model_copy(update={"plugins": tuple(refs_out)}))
        update: dict[str, object] = {"scheduling_profiles": tuple(defaulted)}

        flow_control = self.config.flow_control or FlowControlConfig()
        detector = flow_control.saturation_detector
        if detector is None or not detector.plugin_ref:  # upstream: unset or empty → utilization-detector
            name = DEFAULT_SATURATION_DETECTOR_TYPE
            if name not in plugins:
                self._add_default_plugin(DEFAULT_SATURATION_DETECTOR_TYPE)
            detector = SaturationDetectorRef(plugin_ref=name)
            update["flow_control"] = flow_control.model_copy(update={"saturation_detector": detector})
        handler = self.config.request_handler or RequestHandlerConfig()
        if not handler.parsers:  # upstream ensureParsers: the default list, declared plugins reused by name
            for type_name in DEFAULT_PARSER_TYPES:
                if type_name not in plugins:
                    self._add_default_plugin(type_name)
            parser_refs = tuple(PluginRef(plugin_ref=type_name) for type_name in DEFAULT_PARSER_TYPES)
            update["request_handler"] = handler.model_copy(update={"parsers": parser_refs})
        self.config = self.config.model_copy(update=update)
        data_layer = default_sources(self.config, plugins, self._add_default_plugin)
        if data_layer is not None:
            self.config = self.config.model_copy(update={"data_layer": data_layer})

    def resolve_data(self) -> DataGraph:
        """The default producers the declared data needs, added; the producers' order and the scopes."""
        return resolve_data(self.plugins, self._registry, self._add_default_plugin)

    def _ref(self, where: str, ref: str) -> Plugin:
        plugin = self.plugins.get(ref)
        if plugin is None:
            raise ConfigError(f"{where}: references undefined plugin {ref!r}")
        return plugin

    def build(self, build_scrape: ScrapeBuilder | None) -> LoadedConfig:
        config, plugins = self.config, self.plugins
        handlers = playing(plugins.values(), PluginKind.PROFILE_HANDLER)
        if len(handlers) > 1:
            names = sorted(h.typed_name.name for h in handlers)
            raise ConfigError(f"plugins: at most one profile handler is allowed, got {names}")
        if not handlers:
            raise ConfigError(
                f"plugins: {len(config.scheduling_profiles)} scheduling profiles need a profile handler plugin"
            )
        handler = handlers[0]
        assert isinstance(handler, ProfileHandler)  # check_declared_kinds made sure
        if handler.typed_name.type == DEFAULT_PROFILE_HANDLER_TYPE and len(config.scheduling_profiles) != 1:
            raise ConfigError(
                f"schedulingProfiles: {handler.typed_name.type} allows exactly one profile, "
                f"got {len(config.scheduling_profiles)}"
            )

        for name, plugin in plugins.items():
            if isinstance(plugin, PluginReferrer):
                try:
                    plugin.resolve_references(self._ref)
                except ValueError as exc:
                    raise ConfigError(f"plugin {name!r} (type {plugin.typed_name.type!r}).parameters: {exc}") from exc

        profiles: dict[str, SchedulerProfile] = {}
        for i, spec in enumerate(config.scheduling_profiles):
            profiles[spec.name] = self._build_profile(i, spec)

        detector_ref = config.flow_control.saturation_detector if config.flow_control is not None else None
        detector_name = detector_ref.plugin_ref if detector_ref is not None else DEFAULT_SATURATION_DETECTOR_TYPE
        detector = self._ref(self._detector_where, detector_name)
        if not plays(detector, PluginKind.SATURATION_DETECTOR) or not isinstance(detector, SaturationDetector):
            raise ConfigError(
                f"{self._detector_where}: plugin {detector_name!r} "
                f"(type {detector.typed_name.type!r}) is not a saturation detector"
            )
        parsers = self._parsers()
        discovery = discovery_plugin(config, self._ref)
        scrape, data_layer_notices = data_layer_scrape(config, plugins, self._ref, build_scrape)

        self_admitting = all(
            any(isinstance(f, SelfAdmitting) and f.sheds_sheddable_work for f in profile.filters)
            for profile in profiles.values()
        )
        return LoadedConfig(
            config=config,
            plugins=MappingProxyType(dict(plugins)),
            scheduler=Scheduler(profile_handler=handler, profiles=profiles),
            saturation_detector=detector,
            pre_request=tuple(
                p for p in plugins.values() if plays(p, PluginKind.PRE_REQUEST) and isinstance(p, PreRequest)
            ),
            post_response=tuple(
                p for p in plugins.values() if plays(p, PluginKind.POST_RESPONSE) and isinstance(p, PostResponse)
            ),
            response_headers=tuple(p for p in plugins.values() if isinstance(p, ResponseHeaderContributor)),
            endpoint_observers=tuple(p for p in plugins.values() if isinstance(p, EndpointsObserver)),
            endpoints_added=tuple(p for p in plugins.values() if isinstance(p, EndpointsAddedObserver)),
            data_producers=tuple(
                p for p in plugins.values() if plays(p, PluginKind.DATA_PRODUCER) and isinstance(p, DataProducer)
            ),
            closables=tuple(p for p in plugins.values() if isinstance(p, AsyncClosable)),
            measured=tuple(p for p in plugins.values() if isinstance(p, Measured)),
            admission=self._detector_named or not self_admitting,
            discovery=discovery,
            notices=tuple(data_layer_notices),
            scrape=scrape,
            parsers=parsers,
            in_flight=next(
                (
                    p
                    for p in plugins.values()
                    if plays(p, PluginKind.IN_FLIGHT_ESTIMATOR) and isinstance(p, InFlightEstimator)
                ),
                InFlightLoadProducer(),
            ),
        )

    def _parsers(self) -> ParserTable:
        """The request handler's parsers, each defined and a parser, as a resolution table."""
        config = self.config
        refs = config.request_handler.parsers if config.request_handler is not None else ()
        parsers: list[Parser] = []
        for i, ref in enumerate(refs):
            where = "parser.pluginRef" if ref is config.parser else f"requestHandler.parsers[{i}].pluginRef"
            plugin = self._ref(where, ref.plugin_ref)
            if not plays(plugin, PluginKind.PARSER) or not isinstance(plugin, Parser):
                raise ConfigError(
                    f"{where}: plugin {ref.plugin_ref!r} (type {plugin.typed_name.type!r}) is not a parser"
                )
            parsers.append(plugin)
        return ParserTable(parsers)

    def _build_profile(self, index: int, spec: SchedulingProfile) -> SchedulerProfile:
        filters: list[Filter] = []
        scorers: list[WeightedScorer] = []
        pickers: list[Picker] = []
        for j, ref in enumerate(spec.plugins):
            where = f"schedulingProfiles[{index}].plugins[{j}]"
            plugin = self._ref(f"{where}.pluginRef", ref.plugin_ref)
            roles = 0
            if plays(plugin, PluginKind.FILTER) and isinstance(plugin, Filter):
                filters.append(plugin)
                roles += 1
            if plays(plugin, PluginKind.SCORER) and isinstance(plugin, Scorer):
                weight = DEFAULT_SCORER_WEIGHT if ref.weight is None else ref.weight
                scorers.append(WeightedScorer(plugin, weight))
                roles += 1
            if plays(plugin, PluginKind.PICKER) and isinstance(plugin, Picker):
                pickers.append(plugin)
                roles += 1
            # Upstream's samples list predicted-latency-producer in the profile, where the router ignores
            # what is not a filter, scorer or picker: a data producer runs before the cycle either way.
            if not roles and not plays(plugin, PluginKind.DATA_PRODUCER):
                raise ConfigError(
                    f"{where}.pluginRef: plugin {ref.plugin_ref!r} (type {plugin.typed_name.type!r}) "
                    "is not a filter, scorer or picker"
                )
        if len(pickers) != 1:
            names = [p.typed_name.name for p in pickers]
            raise ConfigError(
                f"schedulingProfiles[{index}] ({spec.name!r}): exactly one picker is required, got {names}"
            )
        return SchedulerProfile(spec.name, filters=filters, scorers=scorers, picker=pickers[0])
