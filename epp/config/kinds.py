"""The contract behind each :class:`~epp.framework.plugin.PluginKind`, and the check that a plugin keeps it.

A plugin is used only in the kinds its type declares (``NamedPlugin.kinds``); this module checks, when
the loader creates a plugin, that it implements the contract of every kind it declares, so a
declaration can be trusted from then on. A method that merely shares a name with another kind's
(a fairness policy's ``pick``) never makes a plugin serve that kind.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from epp.config.picker_config import ConfigError
from epp.framework.admission import Admitter
from epp.framework.datalayer import MetricsExtractor, MetricsSource
from epp.framework.discovery import EndpointDiscovery
from epp.framework.flowcontrol import FairnessPolicy, OrderingPolicy, UsageLimitPolicy
from epp.framework.parsing import Parser
from epp.framework.plugin import Plugin, PluginKind, declared_kinds
from epp.framework.producers import DataProducer
from epp.framework.request_header import RequestHeaderProcessor
from epp.framework.response import ResponseComplete
from epp.framework.saturation import SaturationDetector
from epp.framework.scheduling import (
    Filter,
    InFlightEstimator,
    Picker,
    PostResponse,
    PreRequest,
    ProfileHandler,
    Scorer,
)

__all__ = ["check_declared_kinds", "plays", "playing"]

# ENDPOINT_SOURCE has no method of its own: the data layer wires it by type.
_CONTRACTS: Mapping[PluginKind, type] = {
    PluginKind.FILTER: Filter,
    PluginKind.SCORER: Scorer,
    PluginKind.PICKER: Picker,
    PluginKind.PROFILE_HANDLER: ProfileHandler,
    PluginKind.DATA_PRODUCER: DataProducer,
    PluginKind.PRE_REQUEST: PreRequest,
    PluginKind.POST_RESPONSE: PostResponse,
    PluginKind.IN_FLIGHT_ESTIMATOR: InFlightEstimator,
    PluginKind.SATURATION_DETECTOR: SaturationDetector,
    PluginKind.PARSER: Parser,
    PluginKind.ORDERING_POLICY: OrderingPolicy,
    PluginKind.FAIRNESS_POLICY: FairnessPolicy,
    PluginKind.USAGE_LIMIT_POLICY: UsageLimitPolicy,
    PluginKind.DATA_SOURCE: MetricsSource,
    PluginKind.DATA_EXTRACTOR: MetricsExtractor,
    PluginKind.ENDPOINT_DISCOVERY: EndpointDiscovery,
    PluginKind.ADMITTER: Admitter,
    PluginKind.RESPONSE_STREAMING: ResponseComplete,
    PluginKind.REQUEST_HEADER: RequestHeaderProcessor,
}


def plays(plugin: Plugin | None, kind: PluginKind) -> bool:
    """Whether ``plugin``'s type declares ``kind`` (None plays nothing)."""
    return plugin is not None and kind in declared_kinds(plugin)


def playing(plugins: Iterable[Plugin], kind: PluginKind) -> list[Plugin]:
    """The plugins whose types declare ``kind``, in order."""
    return [p for p in plugins if kind in declared_kinds(p)]


def check_declared_kinds(plugin: Plugin, where: str) -> None:
    """ConfigError when ``plugin`` declares a kind whose contract it does not implement."""
    for kind in sorted(declared_kinds(plugin)):
        contract = _CONTRACTS.get(kind)
        if contract is not None and not isinstance(plugin, contract):
            raise ConfigError(
                f"{where} ({plugin.typed_name.name!r}, type {plugin.typed_name.type!r}): the type declares the "
                f"{kind} kind but does not implement its contract ({contract.__name__})"
            )
