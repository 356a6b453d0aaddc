"""The ``flowControl`` section, validated into what the flow controller runs (with the ``flowControl`` gate).

Defaults and rules are the llm-d router's (``pkg/epp/flowcontrol/{config.go,registry/config.go}``):

- ``maxBytes`` / ``maxRequests``: global limits, 0 or unset = none;
- ``defaultRequestTTL``: unset = 60s, ``0s`` = no TTL; ``noEndpointRequestTTL`` (the budget while
  the pool has no endpoint): unset = the same as ``defaultRequestTTL``;
- each band: ``maxBytes`` 1,000,000,000 and ``maxRequests`` 5000 when unset or 0;
  ``fairnessPolicyRef`` / ``orderingPolicyRef`` from ``defaultPriorityBand``, else
  ``global-strict-fairness-policy`` / ``fcfs-ordering-policy`` (added when not declared);
- a priority without a ``priorityBands`` entry gets a band cloned from ``defaultPriorityBand``
  on first use, or from ``defaultNegativePriorityBand`` for a priority below 0 when that is set;
- ``usageLimitPolicyPluginRef``: unset = ``static-usage-limit-policy`` (ceiling 1.0 everywhere).

Errors name the field path. ``enableEviction`` (the llm-d router's in-flight eviction) is not
implemented and is refused rather than ignored. The settings are read once at startup, as
upstream: :meth:`FlowControlSettings.fingerprint` lets a reload refuse a changed section.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from epp.config.kinds import plays
from epp.config.picker_config import ConfigError, FlowControlConfig, PriorityBandConfig
from epp.durations import parse_duration
from epp.framework.flowcontrol import FairnessPolicy, OrderingPolicy, UsageLimitPolicy
from epp.framework.plugin import Plugin, PluginKind
from epp.plugins.flow_policies import FCFS_TYPE, GLOBAL_STRICT_TYPE, STATIC_USAGE_LIMIT_TYPE
from epp.quantities import parse_quantity

__all__ = ["BandSettings", "FlowControlSettings", "flow_control_settings"]

DEFAULT_TTL = 60.0
BAND_MAX_BYTES = 1_000_000_000
BAND_MAX_REQUESTS = 5000


@dataclass(frozen=True, slots=True)
class BandSettings:
    """One priority band's limits and policies (a template for bands made on first use)."""

    priority: int
    max_bytes: int
    max_requests: int
    fairness: FairnessPolicy
    ordering: OrderingPolicy


@dataclass(frozen=True, slots=True)
class FlowControlSettings:
    """The validated ``flowControl`` section; 0 means "no limit" for the global limits and the TTLs."""

    max_bytes: int
    max_requests: int
    ttl: float
    no_endpoint_ttl: float
    bands: Mapping[int, BandSettings]
    default_band: BandSettings
    default_negative_band: BandSettings | None
    usage_limit: UsageLimitPolicy

    def band_for(self, priority: int) -> BandSettings:
        """The settings of ``priority``'s band: configured, else cloned from the default template."""
        band = self.bands.get(priority)
        if band is not None:
            return band
        template = self.default_band
        if priority < 0 and self.default_negative_band is not None:
            template = self.default_negative_band
        return BandSettings(priority, template.max_bytes, template.max_requests, template.fairness, template.ordering)

    def fingerprint(self) -> tuple[object, ...]:
        """Everything but plugin identity: equal fingerprints mean the same queueing behaviour."""

        def band(b: BandSettings | None) -> tuple[object, ...] | None:
            if b is None:
                return None
            return (b.priority, b.max_bytes, b.max_requests, b.fairness.typed_name, b.ordering.typed_name)

        return (
            self.max_bytes,
            self.max_requests,
            self.ttl,
            self.no_endpoint_ttl,
            tuple(band(b) for b in self.bands.values()),
            band(self.default_band),
            band(self.default_negative_band),
            self.usage_limit.typed_name,
            getattr(self.usage_limit, "threshold", None),
        )


def _bytes(value: str | int | None, where: str) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        number = value
    else:
        try:
            number = parse_quantity(value)
        except ValueError as exc:
            raise ConfigError(f"{where}: invalid quantity {value!r} (use e.g. 1Gi, 500M or an integer)") from exc
    if number < 0:
        raise ConfigError(f"{where}: must not be negative (got {value!r})")
    return number


def _ttl(value: str | None, where: str, default: float) -> float:
    if value is None:
        return default
    seconds = parse_duration(value)
    if seconds < 0:
        raise ConfigError(f"{where}: must not be negative (got {value!r})")
    return seconds


PluginLookup = Callable[[str, str], Plugin]
"""``(where, name)`` → the plugin of that name; raises ConfigError naming ``where`` when undefined."""


class _Bands:
    """Resolves band entries against the default band and the declared policy plugins."""

    def __init__(self, lookup: PluginLookup, add_default: Callable[[str], str]) -> None:
        self._lookup = lookup
        self._add_default = add_default

    def _policy(self, where: str, ref: str | None, default_type: str, kind: PluginKind) -> Plugin:
        name = ref if ref else self._add_default(default_type)
        plugin = self._lookup(where, name)
        if not plays(plugin, kind):
            raise ConfigError(
                f"{where}: plugin {name!r} (type {plugin.typed_name.type!r}) is not a {kind} "
                "(a flow-control policy of that kind)"
            )
        return plugin

    def band(self, spec: PriorityBandConfig | None, where: str, template: BandSettings | None) -> BandSettings:
        spec = spec or PriorityBandConfig()
        max_bytes = _bytes(spec.max_bytes, f"{where}.maxBytes") or (
            template.max_bytes if template is not None else BAND_MAX_BYTES
        )
        max_requests = _bytes(spec.max_requests, f"{where}.maxRequests") or (
            template.max_requests if template is not None else BAND_MAX_REQUESTS
        )
        fairness: Plugin
        ordering: Plugin
        if spec.fairness_policy_ref is None and template is not None:
            fairness = template.fairness
        else:
            fairness = self._policy(
                f"{where}.fairnessPolicyRef", spec.fairness_policy_ref, GLOBAL_STRICT_TYPE, PluginKind.FAIRNESS_POLICY
            )
        if spec.ordering_policy_ref is None and template is not None:
            ordering = template.ordering
        else:
            ordering = self._policy(
                f"{where}.orderingPolicyRef", spec.ordering_policy_ref, FCFS_TYPE, PluginKind.ORDERING_POLICY
            )
        assert isinstance(fairness, FairnessPolicy) and isinstance(ordering, OrderingPolicy)
        return BandSettings(spec.priority or 0, max_bytes, max_requests, fairness, ordering)


def flow_control_settings(
    section: FlowControlConfig, lookup: PluginLookup, add_default: Callable[[str], str]
) -> FlowControlSettings:
    """Validate ``section`` (with the gate on); ``add_default(type)`` declares a default policy plugin."""
    where = "flowControl"
    if section.enable_eviction:
        raise ConfigError(
            f"{where}.enableEviction: in-flight eviction (the llm-d router's) is not implemented by this picker; "
            "remove it or set it to false"
        )
    resolver = _Bands(lookup, add_default)
    default_band = resolver.band(section.default_priority_band, f"{where}.defaultPriorityBand", None)
    negative = None
    if section.default_negative_priority_band is not None:
        negative = resolver.band(
            section.default_negative_priority_band, f"{where}.defaultNegativePriorityBand", default_band
        )
    bands: dict[int, BandSettings] = {}
    for i, spec in enumerate(section.priority_bands):
        band_where = f"{where}.priorityBands[{i}]"
        if spec.priority is None:
            raise ConfigError(f"{band_where}.priority: required field missing")
        if spec.priority in bands:
            raise ConfigError(f"{band_where}.priority: duplicate priority {spec.priority}")
        bands[spec.priority] = resolver.band(spec, band_where, default_band)
    ttl = _ttl(section.default_request_ttl, f"{where}.defaultRequestTTL", DEFAULT_TTL)
    no_endpoint_ttl = _ttl(section.no_endpoint_request_ttl, f"{where}.noEndpointRequestTTL", ttl)
    usage_ref = section.usage_limit_policy_plugin_ref
    usage_where = f"{where}.usageLimitPolicyPluginRef"
    usage = lookup(usage_where, usage_ref if usage_ref else add_default(STATIC_USAGE_LIMIT_TYPE))
    if not plays(usage, PluginKind.USAGE_LIMIT_POLICY) or not isinstance(usage, UsageLimitPolicy):
        raise ConfigError(
            f"{usage_where}: plugin {usage.typed_name.name!r} (type {usage.typed_name.type!r}) is not a usage-limit "
            "policy"
        )
    return FlowControlSettings(
        max_bytes=_bytes(section.max_bytes, f"{where}.maxBytes"),
        max_requests=_bytes(section.max_requests, f"{where}.maxRequests"),
        ttl=ttl,
        no_endpoint_ttl=no_endpoint_ttl,
        bands=bands,
        default_band=default_band,
        default_negative_band=negative,
        usage_limit=usage,
    )
