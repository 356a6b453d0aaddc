"""The public plugin API: everything a plugin written outside this repository may import from epp.

This module is the whole promise to out-of-tree plugins (``pip install``-ed distributions that
register plugin types through the ``epp.plugins`` entry-point group, see docs/plugins.md).
Every name in ``__all__`` keeps its meaning under :data:`API_VERSION`'s semantic versioning;
anything else in ``epp`` is private and may change in any release.

- **Versioning.** ``API_VERSION`` is ``MAJOR.MINOR.PATCH``. A name removed or a contract
  changed incompatibly bumps MAJOR; a name or an optional hook added bumps MINOR; a fix that
  changes no signature bumps PATCH. A plugin states the version it was built against in its
  :class:`PluginDefinition`; the picker loads it when the MAJOR is the same and its MINOR is not
  newer than the picker's (:func:`api_version_compatible`), and refuses it otherwise, naming the
  plugin and both versions.
- **Identity and registration.** A plugin object has a ``typed_name`` (:class:`TypedName`) and
  declares the extension points it serves in ``kinds`` (:class:`PluginKind`);
  :class:`NamedPlugin` holds both. A factory (:data:`PluginFactory`) gets the instance name,
  the ``parameters`` mapping of the configuration and a :class:`PluginContext`, reads the
  parameters with :class:`Params` and raises :class:`PluginConfigError` naming the bad one.
  The entry point names a :class:`PluginDefinition` (type name, factory, API version, stability).
- **The kinds** (a plugin is used only in the kinds it declares, and must implement each):
  :class:`Filter`, :class:`Scorer` (scores nominally in [0, 1]; the runner clamps them),
  :class:`Picker`, :class:`ProfileHandler`, :class:`DataProducer` (awaited before scheduling),
  :class:`PreRequest` and :class:`PostResponse`, :class:`ResponseComplete` (the whole response's
  usage), :class:`Parser` (owns an API's request bodies), :class:`SaturationDetector` and
  :class:`Admitter` (admission), and the flow-control policies
  :class:`OrderingPolicy`, :class:`FairnessPolicy`, :class:`UsageLimitPolicy`.
- **What they receive.** The request (:class:`InferenceRequest`, its :class:`Prompt` as the
  parser read it), the endpoints (:class:`EndpointState`: the :class:`Endpoint`, its latest
  :class:`MetricsSnapshot` with ``custom`` metrics, its :class:`EndpointHealth`), the cycle's
  scratch space (:class:`CycleState`) and results (:class:`ScoredEndpoint`,
  :class:`ProfileResult`, :class:`SchedulingResult`).
- **Optional hooks** a plugin may also implement: :class:`EndpointsObserver` (free per-endpoint
  state), :class:`ResponseHeaderContributor`, :class:`AsyncClosable` (background resources),
  :class:`StatefulPlugin` (state kept across a reload), :class:`PluginReferrer` (parameters
  naming other plugins).

A scheduling cycle is synchronous and runs on the picker's event loop: a filter, scorer or picker
must not block (no I/O, no sleeps); work that waits belongs in a :class:`DataProducer`. The
picker contains a plugin that breaks its contract (it raises, returns a malformed result, scores
outside [0, 1], or takes too long): the request is still routed by the rules of docs/plugins.md,
and ``epp_plugin_errors_total`` counts it per plugin.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final

from epp.clock import Clock
from epp.errors import EppError, ErrorCode
from epp.framework.admission import Admitter, Denial
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.flowcontrol import FairnessPolicy, FlowView, OrderingPolicy, QueuedRequest, UsageLimitPolicy
from epp.framework.health import EndpointHealth, Health
from epp.framework.params import Params, parse_duration
from epp.framework.parsing import ParsedBody, Parser
from epp.framework.plugin import (
    NamedPlugin,
    Plugin,
    PluginConfigError,
    PluginContext,
    PluginFactory,
    PluginKind,
    StatefulPlugin,
    TypedName,
)
from epp.framework.producers import AsyncClosable, DataProducer, PluginReferrer
from epp.framework.prompt import EMPTY_PROMPT, ChatPrompt, JsonPrompt, Prompt, TextPrompt, TokenPrompt
from epp.framework.request import ApiKind, InferenceRequest
from epp.framework.response import CompletedResponse, ResponseComplete, Usage
from epp.framework.saturation import SaturationDetector
from epp.framework.scheduling import (
    CycleState,
    EndpointsObserver,
    Filter,
    Picker,
    PostResponse,
    PreRequest,
    ProfileHandler,
    ProfileResult,
    ResponseHeaderContributor,
    SchedulerProfileView,
    SchedulingResult,
    ScoredEndpoint,
    Scorer,
)

__all__ = [
    "API_VERSION",
    "EMPTY_PROMPT",
    "Admitter",
    "ApiKind",
    "AsyncClosable",
    "ChatPrompt",
    "Clock",
    "CompletedResponse",
    "CycleState",
    "DataProducer",
    "Denial",
    "Endpoint",
    "EndpointHealth",
    "EndpointState",
    "EndpointsObserver",
    "EppError",
    "ErrorCode",
    "FairnessPolicy",
    "Filter",
    "FlowView",
    "Health",
    "InferenceRequest",
    "JsonPrompt",
    "MetricsSnapshot",
    "NamedPlugin",
    "OrderingPolicy",
    "Params",
    "ParsedBody",
    "Parser",
    "Picker",
    "Plugin",
    "PluginConfigError",
    "PluginContext",
    "PluginDefinition",
    "PluginFactory",
    "PluginKind",
    "PluginReferrer",
    "PostResponse",
    "PreRequest",
    "ProfileHandler",
    "ProfileResult",
    "Prompt",
    "QueuedRequest",
    "ResponseComplete",
    "ResponseHeaderContributor",
    "SaturationDetector",
    "SchedulerProfileView",
    "SchedulingResult",
    "ScoredEndpoint",
    "Scorer",
    "StatefulPlugin",
    "TextPrompt",
    "TokenPrompt",
    "TypedName",
    "Usage",
    "UsageLimitPolicy",
    "api_version_compatible",
    "parse_duration",
]

API_VERSION: Final = "1.1.0"
"""The version of this module's promise (see the module docstring for what each part means)."""

_VERSION = re.compile(r"(0|[1-9]\d*)\.(0|[1-9]\d*)(?:\.(0|[1-9]\d*))?")
_TYPE_NAME = re.compile(r"[a-z0-9]([a-z0-9.-]*[a-z0-9])?")


def _major_minor(version: str) -> tuple[int, int]:
    match = _VERSION.fullmatch(version)
    if match is None:
        raise ValueError(f"an API version is MAJOR.MINOR or MAJOR.MINOR.PATCH, got {version!r}")
    return int(match[1]), int(match[2])


def api_version_compatible(built_for: str) -> bool:
    """Whether a plugin built against plugin API ``built_for`` runs on this picker's :data:`API_VERSION`:
    the same MAJOR, and a MINOR no newer than this one's. Raises ValueError for a malformed version."""
    major, minor = _major_minor(built_for)
    ours_major, ours_minor = _major_minor(API_VERSION)
    return major == ours_major and minor <= ours_minor


@dataclass(frozen=True, slots=True)
class PluginDefinition:
    """What an ``epp.plugins`` entry point names: one plugin type of an installed distribution.

    ``type_name`` is the name configurations use in ``plugins[].type`` and must equal the entry
    point's name; ``factory`` builds an instance from (name, parameters, context);
    ``api_version`` is the :data:`API_VERSION` the plugin was written against (write the literal,
    e.g. ``"1.0"``: reading :data:`API_VERSION` at import time would always match);
    ``experimental`` types load only when the picker runs with ``--allow-experimental-plugins``.

    Example (``pyproject.toml``: ``[project.entry-points."epp.plugins"]``
    ``zone-affinity-filter = "my_plugins.zone:ZONE_AFFINITY_FILTER"``)::

        ZONE_AFFINITY_FILTER = PluginDefinition("zone-affinity-filter", create, api_version="1.0")
    """

    type_name: str
    factory: PluginFactory
    api_version: str
    experimental: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type_name, str) or not _TYPE_NAME.fullmatch(self.type_name):
            raise ValueError(f"a plugin type name is lower-case letters, digits, '-' and '.', got {self.type_name!r}")
        if not callable(self.factory):
            raise ValueError(f"plugin type {self.type_name!r}: factory must be callable, got {self.factory!r}")
        _major_minor(self.api_version)
