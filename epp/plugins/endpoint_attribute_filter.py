"""endpoint-attribute-filter: keep the candidates whose numeric endpoint attribute passes a threshold.

The llm-d router's ``scheduling/filter/endpointattribute``: ``attribute`` is a custom metric of
``core-metrics-extractor`` (``epp/plugins/_attributes.py``: how it is scraped, which producers
exist); ``algorithm`` is ``{type: threshold, threshold: {operator, value}}`` (operators
``LessThan``, ``LessThanOrEqual``, ``GreaterThan``, ``GreaterThanOrEqual``, ``Equal``,
``NotEqual``); an endpoint without the attribute is kept (``onMissing: Pass``, the default) or
dropped (``Fail``); with ``fallbackOnEmpty`` a set the filter empties is kept whole. Upstream
registers it Alpha.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._attributes import attribute_name, read_attribute

__all__ = ["OPERATORS", "TYPE", "EndpointAttributeFilter", "create"]

TYPE = "endpoint-attribute-filter"

OPERATORS: Mapping[str, Callable[[float, float], bool]] = {
    "LessThan": operator.lt,
    "LessThanOrEqual": operator.le,
    "GreaterThan": operator.gt,
    "GreaterThanOrEqual": operator.ge,
    "Equal": operator.eq,
    "NotEqual": operator.ne,
}


class EndpointAttributeFilter(NamedPlugin):
    """Candidates whose ``attribute`` compares true against ``value``."""

    __slots__ = ("attribute", "compare", "fallback_on_empty", "pass_on_missing", "value")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})

    def __init__(
        self,
        name: str,
        attribute: str,
        compare: Callable[[float, float], bool],
        value: float,
        *,
        pass_on_missing: bool = True,
        fallback_on_empty: bool = False,
    ) -> None:
        super().__init__(name)
        self.attribute = attribute
        self.compare = compare
        self.value = value
        self.pass_on_missing = pass_on_missing
        self.fallback_on_empty = fallback_on_empty

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        kept: list[EndpointState] = []
        for c in candidates:
            found = read_attribute(c, self.attribute)
            if self.pass_on_missing if found is None else self.compare(found, self.value):
                kept.append(c)
        if not kept and self.fallback_on_empty:
            return list(candidates)
        return kept


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> EndpointAttributeFilter:
    where = f"{TYPE}.parameters"
    p = Params(TYPE, params)
    attribute = attribute_name(p, "attribute", where)
    on_missing = p.choice("onMissing", "Pass", ("Pass", "Fail"))
    fallback = p.boolean("fallbackOnEmpty", False)
    algorithm = p.nested("algorithm")
    p.done()
    if algorithm is None:
        raise PluginConfigError(f"{where}.algorithm: required ({{type: threshold, threshold: {{operator, value}}}})")
    kind = algorithm.choice("type", "", ("threshold",))
    threshold = algorithm.nested("threshold")
    algorithm.done()
    if not kind or threshold is None:
        raise PluginConfigError(
            f"{where}.algorithm: type 'threshold' and its threshold {{operator, value}} are required"
        )
    op = threshold.choice("operator", "", tuple(OPERATORS))
    has_value = threshold.present("value")
    value = threshold.number("value", 0.0)
    threshold.done()
    if not op or not has_value:
        raise PluginConfigError(
            f"{where}.algorithm.threshold: operator ({', '.join(OPERATORS)}) and value are required"
        )
    return EndpointAttributeFilter(
        name, attribute, OPERATORS[op], value, pass_on_missing=on_missing == "Pass", fallback_on_empty=fallback
    )
