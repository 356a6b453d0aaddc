"""Two out-of-tree plugins for the epp endpoint picker: prefer pods in the client's zone, score by a custom metric.

- ``zone-affinity-filter`` keeps the candidates whose zone label (``labelKey``, default
  ``topology.kubernetes.io/zone``) equals the request's zone: the ``zoneHeader`` request header
  (default ``x-client-zone``), else the ``zone`` parameter (this picker's own zone). A request
  with no zone keeps every candidate. When no candidate is in the zone every candidate is kept
  (traffic leaves the zone rather than failing), unless ``strict: true``, which fails the profile.
- ``custom-metric-scorer`` scores each candidate by a metric its model server exposes and the
  picker scrapes: ``core-metrics-extractor``'s ``customMetrics`` stores it on the endpoint's
  snapshot under an attribute key, named here by ``attribute``. Scores are min-max normalised over
  the candidates, low values best unless ``lowerIsBetter: false``; all equal score 1, and a
  candidate without the metric (not scraped yet, or not exposing it) scores 0.

Registered by the ``epp.plugins`` entry points of this distribution's ``pyproject.toml``; written
against ``epp.plugin_api`` only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.plugin_api import (
    CycleState,
    EndpointState,
    InferenceRequest,
    NamedPlugin,
    Params,
    PluginConfigError,
    PluginContext,
    PluginDefinition,
    PluginKind,
)

ZONE_LABEL = "topology.kubernetes.io/zone"


class ZoneAffinityFilter(NamedPlugin):
    """Keeps the candidates in the request's zone (see the module docstring)."""

    __slots__ = ("label_key", "strict", "zone", "zone_header")
    plugin_type = "zone-affinity-filter"
    kinds = frozenset({PluginKind.FILTER})

    def __init__(self, name: str, *, zone: str, zone_header: str, label_key: str, strict: bool) -> None:
        super().__init__(name)
        self.zone = zone
        self.zone_header = zone_header.lower()  # the picker hands plugins lower-case header names
        self.label_key = label_key
        self.strict = strict

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        zone = request.headers.get(self.zone_header) or self.zone
        if not zone:
            return list(candidates)
        in_zone = [c for c in candidates if c.endpoint.labels.get(self.label_key) == zone]
        return in_zone if in_zone or self.strict else list(candidates)


def create_zone_affinity_filter(name: str, parameters: Mapping[str, Any], context: PluginContext) -> ZoneAffinityFilter:
    params = Params(ZoneAffinityFilter.plugin_type, parameters)
    plugin = ZoneAffinityFilter(
        name,
        zone=params.text("zone") or "",
        zone_header=params.string("zoneHeader", "x-client-zone"),
        label_key=params.string("labelKey", ZONE_LABEL),
        strict=params.boolean("strict", False),
    )
    params.done()
    return plugin


class CustomMetricScorer(NamedPlugin):
    """Scores by one scraped custom metric, min-max normalised (see the module docstring)."""

    __slots__ = ("attribute", "lower_is_better")
    plugin_type = "custom-metric-scorer"
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str, *, attribute: str, lower_is_better: bool) -> None:
        super().__init__(name)
        self.attribute = attribute
        self.lower_is_better = lower_is_better

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        values = [c.metrics.custom.get(self.attribute) for c in candidates]
        known = [v for v in values if v is not None]
        if not known:
            return [0.0] * len(candidates)
        low, high = min(known), max(known)
        span = high - low
        scores: list[float] = []
        for value in values:
            if value is None:
                scores.append(0.0)
            elif span == 0.0:
                scores.append(1.0)
            else:
                scores.append((high - value) / span if self.lower_is_better else (value - low) / span)
        return scores


def create_custom_metric_scorer(name: str, parameters: Mapping[str, Any], context: PluginContext) -> CustomMetricScorer:
    params = Params(CustomMetricScorer.plugin_type, parameters)
    attribute = params.string("attribute", "")
    lower_is_better = params.boolean("lowerIsBetter", True)
    params.done()
    if not attribute:
        raise PluginConfigError(
            f"{CustomMetricScorer.plugin_type}.parameters.attribute: required (a customMetrics key)"
        )
    return CustomMetricScorer(name, attribute=attribute, lower_is_better=lower_is_better)


# What the entry points name. api_version is the epp.plugin_api version these were written against.
ZONE_AFFINITY_FILTER = PluginDefinition("zone-affinity-filter", create_zone_affinity_filter, api_version="1.0")
CUSTOM_METRIC_SCORER = PluginDefinition("custom-metric-scorer", create_custom_metric_scorer, api_version="1.0")
