"""The ``dataLayer`` section → the metrics source and extractor the scraper runs, wired as upstream wires them.

Default wiring (the llm-d router's ``ensureDataLayer``; :func:`default_sources`): unless
``dataLayer.injectDefaults`` is false or ``dataLayer.sources`` already lists a metrics source,
the plugins *named* ``metrics-data-source`` and ``core-metrics-extractor`` become the source
and its extractor: the configuration's own when it declares them under those names (as the
charts do, with their parameters; a name defaults to the type), else new ones with default
parameters. A GIE file (``inference.networking.x-k8s.io/v1alpha1``) that has a ``dataLayer``
section gets nothing injected, as GIE did.

Then (:func:`data_layer_scrape`) the one source and its extractor, with GIE's flags under them,
make the scrape spec, through the :data:`ScrapeBuilder` the caller hands in (the runtime's is
``epp.datalayer.scrape_spec.build_scrape_spec`` with the flags; the configuration layer must
not import the data layer, which reads files and sockets). Beyond upstream, and loudly: this picker
runs one metrics source per endpoint, so a ``dataLayer.sources`` of more than one source, or a
source without exactly one extractor, is rejected; with no source at all (``injectDefaults:
false``) it still scrapes, with the flags and defaults (``compat.ignored_settings`` reports
that). A data-layer plugin the wiring leaves out has no effect, as upstream; the loader reports
each one (``dataLayer`` in ``epp_config_ignored_settings``), as it does settings without effect
(a CA bundle while the certificate is not checked, TLS files over plain HTTP).

``dataLayer.discovery`` names the plugin that lists the endpoints when the picker runs without
Kubernetes (``file-discovery``): :func:`discovery_plugin` checks it; the runtime runs it.

An ``endpoint-notification-source`` entry (upstream's way of telling extractors such as the
``precise-prefix-cache-producer`` of endpoints joining and leaving) is not a metrics source and
does not count toward the one: its extractors must be plugins with endpoint hooks, which the
runtime calls for every endpoint change (wired or not, so wiring them is what upstream needs and
changes nothing here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from epp.config.compat import ConfigNotice
from epp.config.kinds import plays
from epp.config.picker_config import (
    LEGACY_API_VERSION,
    ConfigError,
    DataLayerConfig,
    DataLayerSource,
    EndpointPickerConfig,
    PluginRef,
)
from epp.framework.datalayer import MetricsExtractor, MetricsSource, MetricsSourceSpec, ScrapeSpec
from epp.framework.discovery import EndpointDiscovery
from epp.framework.engine_metrics import EngineTable
from epp.framework.plugin import Plugin, PluginKind, declared_kinds
from epp.framework.producers import EndpointsAddedObserver
from epp.framework.scheduling import EndpointsObserver
from epp.plugins import core_metrics_extractor, metrics_data_source
from epp.plugins.endpoint_notification_source import TYPE as _ENDPOINT_SOURCE

__all__ = ["NOTICE_SETTING", "ScrapeBuilder", "data_layer_scrape", "default_sources", "discovery_plugin"]

ScrapeBuilder = Callable[[MetricsSourceSpec | None, EngineTable | None], ScrapeSpec]
"""(source, engine table; None: not configured) → the scrape; raises ValueError naming the parameter."""

NOTICE_SETTING = "dataLayer"
"""The ``epp_config_ignored_settings`` series data-layer notices count in."""

_SOURCE = metrics_data_source.TYPE
_EXTRACTOR = core_metrics_extractor.TYPE
_DATA_LAYER_KINDS = frozenset({PluginKind.DATA_SOURCE, PluginKind.DATA_EXTRACTOR, PluginKind.ENDPOINT_SOURCE})


def default_sources(
    config: EndpointPickerConfig, plugins: Mapping[str, Plugin], add_default: Callable[[str], str]
) -> DataLayerConfig | None:
    """The ``dataLayer`` with the default source appended, or None when nothing is injected.

    ``add_default(type)`` instantiates a plugin of that type under its type name.
    """
    section = config.data_layer
    if section is not None:
        gie_section = config.api_version == LEGACY_API_VERSION and section.inject_defaults is None
        if section.inject_defaults is False or gie_section:
            return None
        if any(plays(plugins.get(s.plugin_ref), PluginKind.DATA_SOURCE) for s in section.sources):
            return None
    for name in (_SOURCE, _EXTRACTOR):
        if name not in plugins:
            add_default(name)
    source = DataLayerSource(plugin_ref=_SOURCE, extractors=(PluginRef(plugin_ref=_EXTRACTOR),))
    section = section or DataLayerConfig()
    return section.model_copy(update={"sources": (*section.sources, source)})


def discovery_plugin(config: EndpointPickerConfig, ref: Callable[[str, str], Plugin]) -> EndpointDiscovery | None:
    """``dataLayer.discovery``'s plugin (endpoints without Kubernetes), defined and of that kind; None when unset."""
    section = config.data_layer
    if section is None or section.discovery is None or not section.discovery.plugin_ref:
        return None
    where = "dataLayer.discovery.pluginRef"
    plugin = ref(where, section.discovery.plugin_ref)
    if not plays(plugin, PluginKind.ENDPOINT_DISCOVERY) or not isinstance(plugin, EndpointDiscovery):
        raise _kind_error(where, plugin, "an endpoint discovery plugin")
    return plugin


def _kind_error(where: str, plugin: Plugin, kind: str) -> ConfigError:
    name, type_name = plugin.typed_name.name, plugin.typed_name.type
    return ConfigError(f"{where}: plugin {name!r} (type {type_name!r}) is not {kind}")


def _endpoint_extractors(index: int, entry: DataLayerSource, ref: Callable[[str, str], Plugin]) -> list[Plugin]:
    """The extractors of an ``endpoint-notification-source`` entry, each checked to have endpoint hooks."""
    extractors: list[Plugin] = []
    for j, extractor_ref in enumerate(entry.extractors):
        where = f"dataLayer.sources[{index}].extractors[{j}].pluginRef"
        extractor = ref(where, extractor_ref.plugin_ref)
        if not isinstance(extractor, EndpointsAddedObserver | EndpointsObserver):
            raise _kind_error(where, extractor, "an endpoint extractor (a plugin told of endpoints coming and going)")
        extractors.append(extractor)
    return extractors


def _wired(
    section: DataLayerConfig | None, ref: Callable[[str, str], Plugin]
) -> tuple[MetricsSource | None, MetricsExtractor | None, list[Plugin]]:
    """(the metrics source, its extractor, the endpoint-notification sources and their extractors)."""
    metrics_entries: list[tuple[int, DataLayerSource, MetricsSource]] = []
    endpoint_wiring: list[Plugin] = []
    for i, entry in enumerate(section.sources if section is not None else ()):
        plugin = ref(f"dataLayer.sources[{i}].pluginRef", entry.plugin_ref)
        if plays(plugin, PluginKind.ENDPOINT_SOURCE):
            endpoint_wiring += [plugin, *_endpoint_extractors(i, entry, ref)]
        elif plays(plugin, PluginKind.DATA_SOURCE) and isinstance(plugin, MetricsSource):
            metrics_entries.append((i, entry, plugin))
        else:
            raise _kind_error(
                f"dataLayer.sources[{i}].pluginRef", plugin, f"a metrics source ({_SOURCE}) or an {_ENDPOINT_SOURCE}"
            )
    if len(metrics_entries) > 1:
        names = [entry.plugin_ref for _, entry, _ in metrics_entries]
        raise ConfigError(
            f"dataLayer.sources: {names}: this picker runs one metrics source per endpoint "
            f"(a {_SOURCE} with its {_EXTRACTOR}); list one"
        )
    if not metrics_entries:
        return None, None, endpoint_wiring
    i, entry, source = metrics_entries[0]
    if len(entry.extractors) != 1:
        names = [e.plugin_ref for e in entry.extractors]
        raise ConfigError(
            f"dataLayer.sources[{i}].extractors: {names}: the {_SOURCE} {entry.plugin_ref!r} needs exactly "
            f"one {_EXTRACTOR} (its only extractor type here, and upstream takes one of each type)"
        )
    where = f"dataLayer.sources[{i}].extractors[0].pluginRef"
    extractor = ref(where, entry.extractors[0].plugin_ref)
    if not plays(extractor, PluginKind.DATA_EXTRACTOR) or not isinstance(extractor, MetricsExtractor):
        raise _kind_error(where, extractor, f"a metrics extractor ({_EXTRACTOR})")
    return source, extractor, endpoint_wiring


def _check_missing_kinds(section: DataLayerConfig | None, ref: Callable[[str, str], Plugin]) -> None:
    """Sources and extractors defined; none of the plugin kinds this picker does not have."""
    if section is None:
        return
    for i, source in enumerate(section.sources):
        ref(f"dataLayer.sources[{i}].pluginRef", source.plugin_ref)
        for j, extractor in enumerate(source.extractors):
            ref(f"dataLayer.sources[{i}].extractors[{j}].pluginRef", extractor.plugin_ref)
    missing_kinds = (
        (
            "dataLayer.peerDiscovery.pluginRef",
            section.peer_discovery.plugin_ref if section.peer_discovery is not None else "",
            "a peer discovery plugin: this picker shares no state between replicas",
        ),
        (
            "dataLayer.crossReplicaSyncerPluginRef",
            section.cross_replica_syncer_plugin_ref,
            "a cross-replica syncer: replicas share state through --state-sync-address (a Valkey/Redis server)",
        ),
    )
    for where, name, kind in missing_kinds:
        if name:
            raise _kind_error(where, ref(where, name), kind)


def data_layer_scrape(
    config: EndpointPickerConfig,
    plugins: Mapping[str, Plugin],
    ref: Callable[[str, str], Plugin],
    build: ScrapeBuilder | None,
) -> tuple[ScrapeSpec | None, list[ConfigNotice]]:
    """The scrape the defaulted ``config`` wires (None without ``build``: only checked), and notices
    for what has no effect; raises ConfigError.

    ``ref(where, name)`` returns the plugin ``name`` or raises a ConfigError naming ``where``.
    """
    _check_missing_kinds(config.data_layer, ref)
    source, extractor, endpoint_wiring = _wired(config.data_layer, ref)
    wired = {id(p) for p in (source, extractor, *endpoint_wiring)}
    notices = [
        ConfigNotice(
            NOTICE_SETTING,
            f"plugin {name!r} (type {plugin.typed_name.type!r}) is not wired in dataLayer.sources, "
            "so it has no effect (as upstream)",
        )
        for name, plugin in plugins.items()
        if declared_kinds(plugin) & _DATA_LAYER_KINDS and id(plugin) not in wired
    ]
    if build is None:
        return None, notices
    try:
        spec = build(
            source.source if source is not None else None,
            extractor.engine_table if extractor is not None else None,
        )
    except ValueError as e:
        where = f"plugin {source.typed_name.name!r} (type {_SOURCE!r}).parameters." if source is not None else ""
        raise ConfigError(f"{where}{e}") from e
    if source is not None:
        notices += [ConfigNotice(NOTICE_SETTING, f"plugin {source.typed_name.name!r}: {n}") for n in spec.notes]
    return spec, notices
