"""Numeric endpoint attributes by name, as ``endpoint-attribute-filter`` and ``-scorer`` read them.

Upstream's attributes are scalars that data-layer plugins publish on each endpoint under
``<attribute>/<producer>``; the configurable ones are ``core-metrics-extractor``'s
``customMetrics`` (``attributeKey`` + ``metricSpec`` in its ``engineConfigs``), which this picker
scrapes into ``MetricsSnapshot.custom``. So an attribute here is a custom metric of that extractor:
``producer`` omitted or ``core-metrics-extractor``. Upstream's other producers (``dcgm-extractor``, the
multicluster pool aggregates under ``producer: ""``) are not in this picker and are refused at load,
naming the producer; an attribute containing ``/`` without a producer is refused as upstream refuses it.
A helper, not a plugin.
"""

from __future__ import annotations

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import PluginConfigError

__all__ = ["CORE_EXTRACTOR", "attribute_name", "read_attribute"]

CORE_EXTRACTOR = "core-metrics-extractor"


def attribute_name(p: Params, key: str, where: str) -> str:
    """The custom-metric name ``p[key]`` (with its ``producer``) designates; PluginConfigError otherwise."""
    attribute = p.text(key) or ""
    producer_set = p.present("producer")
    producer = p.text("producer") if producer_set else None
    if not attribute:
        raise PluginConfigError(f"{where}.{key}: required")
    if producer is None and "/" in attribute:
        head, _, tail = attribute.rpartition("/")
        raise PluginConfigError(
            f"{where}.{key}: {attribute!r} contains '/' but no producer is set; the attribute and its producer "
            f"are separate parameters (attribute {head!r}, producer {tail!r}?); set producer to keep the '/'"
        )
    if producer is not None and producer != CORE_EXTRACTOR:
        raise PluginConfigError(
            f"{where}.producer: {producer!r}: this picker's endpoint attributes are the customMetrics of "
            f"{CORE_EXTRACTOR} only; it has no such producer"
        )
    return attribute


def read_attribute(state: EndpointState, attribute: str) -> float | None:
    """The endpoint's current value of ``attribute``, None when its last scrape did not have it."""
    return state.metrics.custom.get(attribute)
