"""label-selector-filter: keep the candidates whose pod labels match a Kubernetes label selector.

The llm-d router's ``bylabel.Selector``: ``parameters`` is a ``metav1.LabelSelector``
(``matchLabels``: every pair must match; ``matchExpressions``: ``In``, ``NotIn``, ``Exists``,
``DoesNotExist``), matched against each endpoint's pod labels; an empty selector keeps every
candidate. A candidate set the selector empties fails the profile, as any filter that empties it.
The deprecated ``by-label-selector`` type (upstream keeps it until v0.11) is the same filter under
its old name, loaded with a deprecation notice (``config/compat.py``). Unlike upstream, a selector it cannot read (an
unknown operator, ``In`` without values, ``Exists`` with values, an unknown parameter) is refused at load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.labels import Selector, SelectorError, selector_from_object

__all__ = ["DEPRECATED_TYPE", "TYPE", "LabelSelectorFilter", "create", "create_deprecated"]

TYPE = "label-selector-filter"
DEPRECATED_TYPE = "by-label-selector"

_OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")


class LabelSelectorFilter(NamedPlugin):
    """Candidates whose labels the selector matches."""

    __slots__ = ("selector",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})

    def __init__(self, name: str, selector: Selector) -> None:
        super().__init__(name)
        self.selector = selector

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        matches = self.selector.matches
        return [c for c in candidates if matches(c.endpoint.labels)]


class DeprecatedLabelSelectorFilter(LabelSelectorFilter):
    """The same filter reporting its old type name, as upstream's deprecated factory does."""

    __slots__ = ()
    plugin_type = DEPRECATED_TYPE


def parse_selector(type_name: str, params: Mapping[str, Any]) -> Selector:
    """The ``metav1.LabelSelector`` in ``params``; PluginConfigError naming the field."""
    p = Params(type_name, params)
    labels = p.string_map("matchLabels") or {}
    expressions: list[dict[str, Any]] = []
    for i, entry in enumerate(p.mappings("matchExpressions")):
        where = f"{type_name}.parameters.matchExpressions[{i}]"
        key = entry.string("key", "")
        operator = entry.choice("operator", "", _OPERATORS)
        values = entry.strings("values") or []
        entry.done()
        if not key or not operator:
            raise PluginConfigError(f"{where}: key and operator ({', '.join(_OPERATORS)}) are required")
        if operator in ("Exists", "DoesNotExist") and values:
            raise PluginConfigError(f"{where}.values: must be empty for operator {operator}, got {values!r}")
        expressions.append({"key": key, "operator": operator, "values": values})
    p.done()
    try:
        return selector_from_object({"matchLabels": labels, "matchExpressions": expressions})
    except SelectorError as e:
        raise PluginConfigError(f"{type_name}.parameters: {e}") from e


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> LabelSelectorFilter:
    return LabelSelectorFilter(name, parse_selector(TYPE, params))


def create_deprecated(name: str, params: Mapping[str, Any], context: PluginContext) -> LabelSelectorFilter:
    return DeprecatedLabelSelectorFilter(name, parse_selector(DEPRECATED_TYPE, params))
