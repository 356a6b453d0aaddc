"""endpoint-attribute-scorer: score the candidates by a numeric endpoint attribute, linearly normalised.

The llm-d router's ``scheduling/scorer/endpointattribute``: ``attributeKey`` is a custom metric of
``core-metrics-extractor`` (``epp/plugins/_attributes.py``); ``algorithm.type`` is
``linear_higher_is_better`` or ``linear_lower_is_better`` (the score inverted); the range is
``algorithm.normalization.adaptiveRange`` (the default: the candidates' own min and max, all
equal → 1.0 for each that has the attribute) or ``fixedRange: {min, max}`` (values clamped to it).
A candidate without the attribute scores 0 and, adaptively, is left out of the range. Upstream
registers it Alpha.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._attributes import attribute_name, read_attribute

__all__ = ["TYPE", "EndpointAttributeScorer", "create"]

TYPE = "endpoint-attribute-scorer"
_LOWER, _HIGHER = "linear_lower_is_better", "linear_higher_is_better"


class EndpointAttributeScorer(NamedPlugin):
    __slots__ = ("attribute", "fixed_range", "lower_is_better")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(
        self, name: str, attribute: str, *, lower_is_better: bool, fixed_range: tuple[float, float] | None = None
    ) -> None:
        super().__init__(name)
        self.attribute = attribute
        self.lower_is_better = lower_is_better
        self.fixed_range = fixed_range

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        values = [read_attribute(c, self.attribute) for c in candidates]
        present = [v for v in values if v is not None]
        if not present:
            return [0.0] * len(candidates)
        if self.fixed_range is not None:
            low, high = self.fixed_range
        else:
            low, high = min(present), max(present)
            if low == high:  # upstream's neutral score when every candidate with the attribute agrees
                return [0.0 if v is None else 1.0 for v in values]
        span = high - low
        scores: list[float] = []
        for v in values:
            if v is None:
                scores.append(0.0)
                continue
            normalised = min(1.0, max(0.0, (v - low) / span))
            scores.append(1.0 - normalised if self.lower_is_better else normalised)
        return scores


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> EndpointAttributeScorer:
    where = f"{TYPE}.parameters"
    p = Params(TYPE, params)
    attribute = attribute_name(p, "attributeKey", where)
    algorithm = p.nested("algorithm")
    p.done()
    if algorithm is None:
        raise PluginConfigError(f"{where}.algorithm: required (type {_LOWER} or {_HIGHER})")
    kind = algorithm.choice("type", "", (_LOWER, _HIGHER))
    normalization = algorithm.nested("normalization")
    algorithm.done()
    if not kind:
        raise PluginConfigError(f"{where}.algorithm.type: required, {_LOWER} or {_HIGHER}")
    fixed: tuple[float, float] | None = None
    if normalization is not None:
        fixed_params = normalization.nested("fixedRange")
        adaptive = normalization.nested("adaptiveRange")
        normalization.done()
        if fixed_params is not None and adaptive is not None:
            raise PluginConfigError(
                f"{where}.algorithm.normalization: at most one strategy, got both fixedRange and adaptiveRange"
            )
        if adaptive is not None:
            adaptive.done()
        if fixed_params is not None:
            low = fixed_params.number("min", 0.0)
            high = fixed_params.number("max", 0.0)
            fixed_params.done()
            if low >= high:
                raise PluginConfigError(
                    f"{where}.algorithm.normalization.fixedRange: min must be less than max, got min {low}, max {high}"
                )
            fixed = (low, high)
    return EndpointAttributeScorer(name, attribute, lower_is_better=kind == _LOWER, fixed_range=fixed)
