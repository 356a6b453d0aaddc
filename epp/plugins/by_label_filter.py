"""by-label (deprecated upstream): keep the candidates whose label has one of a set of values.

The llm-d router's ``bylabel.ByLabel``: ``label`` (required) names the pod label, ``validValues`` the
values kept; with ``allowsNoLabel`` a pod without the label is kept too. Either ``validValues`` is
non-empty or ``allowsNoLabel`` is true (upstream's own check). Exact string equality only.
Upstream deprecates the type in favour of ``label-selector-filter`` (and the role filters) but still
loads it until v0.11; a configuration naming it loads with a deprecation notice (``config/compat.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "ByLabelFilter", "create"]

TYPE = "by-label"


class ByLabelFilter(NamedPlugin):
    """Candidates whose ``label`` value is one of ``valid_values`` (or, with ``allows_no_label``, unset)."""

    __slots__ = ("allows_no_label", "label", "valid_values")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})

    def __init__(self, name: str, label: str, valid_values: frozenset[str], *, allows_no_label: bool = False) -> None:
        super().__init__(name)
        self.label = label
        self.valid_values = valid_values
        self.allows_no_label = allows_no_label

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        label, valid, allows_none = self.label, self.valid_values, self.allows_no_label
        kept: list[EndpointState] = []
        for c in candidates:
            value = c.endpoint.labels.get(label)
            # Upstream reads a missing label as "": kept when allowed, or when "" is a valid value.
            if (value is None and allows_none) or (value or "") in valid:
                kept.append(c)
        return kept


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> ByLabelFilter:
    p = Params(TYPE, params)
    label = p.text("label") or ""
    values = p.strings("validValues") or []
    allows_no_label = p.boolean("allowsNoLabel", False)
    p.done()
    if not label:
        raise PluginConfigError(f"{TYPE}.parameters.label: must be specified")
    if not values and not allows_no_label:
        raise PluginConfigError(
            f"{TYPE}.parameters: either validValues must be non-empty or allowsNoLabel must be true"
        )
    return ByLabelFilter(name, label, frozenset(values), allows_no_label=allows_no_label)
