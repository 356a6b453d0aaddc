"""header-label-affinity-scorer: 1.0 for the candidates whose label equals a request header, else 0.

The llm-d router's ``scheduling/scorer/headerlabelaffinity``: a soft preference, one instance per
header → label mapping (``headerName``, ``labelKey``, both required), each with its own weight. A
request without the header, or a candidate without the label, contributes 0; nothing is written
back to the client. Upstream registers it Alpha.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "HeaderLabelAffinityScorer", "create"]

TYPE = "header-label-affinity-scorer"


class HeaderLabelAffinityScorer(NamedPlugin):
    __slots__ = ("header", "label")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str, header: str, label: str) -> None:
        super().__init__(name)
        self.header = header.lower()
        self.label = label

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        wanted = request.headers.get(self.header, "")
        if not wanted:
            return [0.0] * len(candidates)
        label = self.label
        return [1.0 if c.endpoint.labels.get(label) == wanted else 0.0 for c in candidates]


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> HeaderLabelAffinityScorer:
    p = Params(TYPE, params)
    header = p.text("headerName") or ""
    label = p.text("labelKey") or ""
    p.done()
    if not header or not label:
        raise PluginConfigError(f"{TYPE}.parameters: headerName and labelKey are both required")
    return HeaderLabelAffinityScorer(name, header, label)
