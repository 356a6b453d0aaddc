"""One EndpointPickerConfig from two upstreams: renamed keys, feature gates, and what we run without.

The llm-d router reads GIE's files too (``inference.networking.x-k8s.io/v1alpha1``, deprecated)
and renamed some keys; both spellings must load, and mean the same. This module reduces a decoded
config to the llm-d spelling (:func:`normalized`), resolves ``featureGates`` (:func:`feature_gates`:
``name``, ``name=true`` or ``name=false``, each gate with its upstream default) and lists the
settings a config may carry that this picker does not implement (:func:`ignored_settings`). None
of those changes routing silently: each is a :class:`ConfigNotice` that
``config_series.publish_notices`` logs once per configuration put in force, setting
``epp_config_ignored_settings{setting}`` to 1 while the configuration in force has it (never for
a configuration that was refused).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from epp.config.picker_config import (
    API_VERSION,
    LEGACY_API_VERSION,
    ConfigError,
    EndpointPickerConfig,
    FlowControlConfig,
    RequestHandlerConfig,
)
from epp.plugins.disagg_profile_handler import FLAT_FIELDS
from epp.plugins.disagg_profile_handler import TYPE as DISAGG_HANDLER

__all__ = [
    "FEATURE_GATES",
    "IGNORABLE_SETTINGS",
    "ConfigNotice",
    "feature_gates",
    "ignored_settings",
    "normalized",
]

log = logging.getLogger(__name__)

FEATURE_GATES: Mapping[str, bool] = MappingProxyType(
    {
        # llm-d router and GIE: queue requests by fairness id and priority (epp.flowcontrol).
        "flowControl": False,
        # llm-d router: followers keep their datastore populated. Ours always do.
        "haPopulateNonLeaderDatastore": True,
        # GIE: poll metrics the legacy way instead of through the data layer. Both read the same
        # model-server metrics, and this picker has one scraper: no difference to make.
        "enableLegacyMetrics": False,
        # GIE: the data layer's old opt-in, a deprecated no-op upstream.
        "dataLayer": False,
    }
)
"""Known ``featureGates`` and whether each is on when the config does not name it."""

_PRECISE_PREFIX_PRODUCER = "precise-prefix-cache-producer"
_RENAMED_TYPES = {"tokenizer": "token-producer"}  # upstream's deprecated type names still loaded, and their successors
_PRECISE_PREFIX_SCORER = "precise-prefix-cache-scorer"  # llm-d's deprecated all-in-one form of the producer chain
_METRICS_DATA_SOURCE = "metrics-data-source"
_DEPRECATED_TYPES: Mapping[str, str] = MappingProxyType(
    {
        _PRECISE_PREFIX_SCORER: f"configure {_PRECISE_PREFIX_PRODUCER} + prefix-cache-scorer with "
        f"prefixMatchInfoProducerName: {_PRECISE_PREFIX_PRODUCER}",
        "by-label-selector": "upstream removes it in v0.11; use 'label-selector-filter'",
        "by-label": "upstream removes it in v0.11; use 'label-selector-filter'",
        # Disaggregated serving (llm-d router v0.7, v0.9): the unified handler sets the headers itself.
        "pd-profile-handler": "use disagg-profile-handler (with deciders.prefill)",
        "disagg-headers-handler": "disagg-profile-handler sets the prefill and encode headers itself",
        "prefill-header-handler": "disagg-profile-handler sets the prefill and encode headers itself",
        "data-parallel-profile-handler": "use single-profile-handler with a pool listing every rank's port "
        "(gateways route to each port: Istio 1.28.1 or later)",
    }
)
"""Plugin types upstream deprecates (still loaded), and what replaces each (a notice each)."""

IGNORABLE_SETTINGS = (
    "flowControl",
    "featureGates.haPopulateNonLeaderDatastore",
    "dataLayer",
    "indexerConfig.kvBlockIndexConfig.enableMetrics",
    "kvEventsConfig.concurrency",
    "indexerConfig.kvBlockIndexConfig.redisConfig.enableRDMA",
    "indexerConfig.kvBlockIndexConfig.valkeyConfig.enableRDMA",
)
"""Settings :func:`ignored_settings` may report (the gauge has a series for each)."""


@dataclass(frozen=True, slots=True)
class ConfigNotice:
    """Something the operator should know about a config that loaded."""

    setting: str
    """Where in the file, as a path (``featureGates.flowControl``)."""
    detail: str
    deprecated: bool = False
    """True: an old spelling, honoured; False: a setting this picker runs without."""


def _parse_bool(text: str) -> bool | None:
    """Go's strconv.ParseBool, as upstream reads ``gate=value``; None when it is not a boolean."""
    value = text.strip().lower()
    if value in ("1", "t", "true"):
        return True
    if value in ("0", "f", "false"):
        return False
    return None


def feature_gates(config: EndpointPickerConfig) -> dict[str, bool]:
    """Every known gate → on or off, after the config's ``featureGates``; raises :class:`ConfigError`."""
    gates = dict(FEATURE_GATES)
    for i, entry in enumerate(config.feature_gates):
        name, sep, value = entry.partition("=")
        if name not in FEATURE_GATES:
            raise ConfigError(f"featureGates[{i}]: unknown feature gate {name!r} (known: {sorted(FEATURE_GATES)})")
        enabled = _parse_bool(value) if sep else True
        if enabled is None:
            raise ConfigError(f"featureGates[{i}]: {value!r} is not a valid value for the feature gate {name!r}")
        gates[name] = enabled
    return gates


def normalized(config: EndpointPickerConfig) -> tuple[EndpointPickerConfig, list[ConfigNotice]]:
    """The config with each deprecated key copied to its llm-d place (unless that is set), and the notices."""
    notices: list[ConfigNotice] = []
    if config.api_version == LEGACY_API_VERSION:
        notices.append(
            ConfigNotice("apiVersion", f"{LEGACY_API_VERSION} is deprecated, use {API_VERSION}", deprecated=True)
        )
    for i, plugin in enumerate(config.plugins):
        renamed = _RENAMED_TYPES.get(plugin.type)
        advice = f"use {renamed}" if renamed is not None else _DEPRECATED_TYPES.get(plugin.type)
        if advice is not None:
            notices.append(
                ConfigNotice(
                    f"plugins[{i}].type",
                    f"plugin {plugin.name or plugin.type!r}: {plugin.type} is deprecated, {advice}",
                    deprecated=True,
                )
            )
        if plugin.type == DISAGG_HANDLER and isinstance(plugin.parameters, Mapping):
            notices.extend(
                ConfigNotice(f"plugins[{i}].parameters.{key}", f"use {FLAT_FIELDS[key]}", deprecated=True)
                for key in sorted(FLAT_FIELDS.keys() & plugin.parameters.keys())
            )
    update: dict[str, object] = {}
    if config.saturation_detector is not None:
        notices.append(
            ConfigNotice(
                "saturationDetector",
                "use flowControl.saturationDetector (which wins when both are set)",
                deprecated=True,
            )
        )
        flow_control = config.flow_control or FlowControlConfig()
        if flow_control.saturation_detector is None:
            update["flow_control"] = flow_control.model_copy(update={"saturation_detector": config.saturation_detector})
    if config.parser is not None:
        notices.append(
            ConfigNotice("parser", "use requestHandler.parsers (which win when both are set)", deprecated=True)
        )
        handler = config.request_handler or RequestHandlerConfig()
        if not handler.parsers:
            update["request_handler"] = handler.model_copy(update={"parsers": (config.parser,)})
    return (config.model_copy(update=update) if update else config), notices


def ignored_settings(
    config: EndpointPickerConfig, gates: Mapping[str, bool], plugin_types: Mapping[str, str]
) -> list[ConfigNotice]:
    """Settings of ``config`` (normalized) that would change behaviour and that this picker does not implement.

    ``plugin_types`` maps each plugin name to its type.
    """
    notices: list[ConfigNotice] = []
    if not gates["flowControl"] and config.flow_control is not None and config.flow_control.queueing_configured:
        notices.append(  # the llm-d router warns the same way (fc/README.md)
            ConfigNotice(
                "flowControl",
                "the flowControl feature gate is off, so only flowControl.saturationDetector takes effect: add "
                "'flowControl' to featureGates to queue requests",
            )
        )
    if not gates["haPopulateNonLeaderDatastore"]:
        notices.append(
            ConfigNotice(
                "featureGates.haPopulateNonLeaderDatastore",
                "followers always keep their datastore populated here, so a failover needs no resync",
            )
        )
    data_layer = config.data_layer
    if data_layer is not None and not any(
        plugin_types.get(s.plugin_ref) == _METRICS_DATA_SOURCE for s in data_layer.sources
    ):
        no_defaults = data_layer.inject_defaults is False  # the llm-d router injects the source unless told not to
        gie_empty = config.api_version == LEGACY_API_VERSION and data_layer.inject_defaults is None  # GIE: none
        if no_defaults or gie_empty:
            notices.append(
                ConfigNotice(
                    "dataLayer",
                    "the config asks for no model-server metrics, but this picker always scrapes them "
                    "(the scorers and the saturation detector read them)",
                )
            )
    for plugin in config.plugins:
        precise = plugin.type in (_PRECISE_PREFIX_PRODUCER, _PRECISE_PREFIX_SCORER)
        if precise and _enables_index_metrics(plugin.parameters):
            notices.append(
                ConfigNotice(
                    "indexerConfig.kvBlockIndexConfig.enableMetrics",
                    f"plugin {plugin.name or plugin.type!r}: the llm_d_epp_kv_cache_index_* lookup, admission "
                    "and eviction series are not emitted (nor logged every metricsLoggingInterval) here; the "
                    "index size is in llm_d_epp_prefix_indexer_size and epp_kv_events_index_blocks",
                )
            )
        if precise and _sets_event_concurrency(plugin.parameters):
            notices.append(
                ConfigNotice(
                    "kvEventsConfig.concurrency",
                    f"plugin {plugin.name or plugin.type!r}: there is no worker pool to size here; each "
                    "endpoint's events are applied in order by its own subscriber task on the event loop",
                )
            )
        for server in _rdma_servers(plugin.parameters) if precise else ():
            notices.append(
                ConfigNotice(
                    f"indexerConfig.kvBlockIndexConfig.{server}.enableRDMA",
                    f"plugin {plugin.name or plugin.type!r}: the index's server is reached over TCP (as "
                    "upstream's Go client does: it has no RDMA transport either)",
                )
            )
    return notices


def _rdma_servers(parameters: Any) -> list[str]:
    indexer = parameters.get("indexerConfig") if isinstance(parameters, Mapping) else None
    block_index = indexer.get("kvBlockIndexConfig") if isinstance(indexer, Mapping) else None
    if not isinstance(block_index, Mapping):
        return []
    return [
        key
        for key in ("redisConfig", "valkeyConfig")
        if isinstance(server := block_index.get(key), Mapping) and server.get("enableRDMA") is True
    ]


def _enables_index_metrics(parameters: Any) -> bool:
    indexer = parameters.get("indexerConfig") if isinstance(parameters, Mapping) else None
    block_index = indexer.get("kvBlockIndexConfig") if isinstance(indexer, Mapping) else None
    return isinstance(block_index, Mapping) and block_index.get("enableMetrics") is True


def _sets_event_concurrency(parameters: Any) -> bool:
    events = parameters.get("kvEventsConfig") if isinstance(parameters, Mapping) else None
    return isinstance(events, Mapping) and "concurrency" in events
