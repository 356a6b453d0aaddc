"""load-aware-scorer: score the candidates by their waiting queue, 0.5 for an empty one down to 0 at ``threshold``.

The llm-d router's ``scheduling/scorer/loadaware``: ``waiting == 0`` → 0.5; else
``0.5 × (1 − min(waiting, threshold) / threshold)``. The ceiling is 0.5, not 1.0 (an empty queue
is the best the metrics can show, not proof of spare capacity), so its pull is about half its
weight. ``threshold`` defaults to 128; upstream replaces a non-positive one by the default, this
picker refuses it at load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "LoadAwareScorer", "create"]

TYPE = "load-aware-scorer"
DEFAULT_THRESHOLD = 128


class LoadAwareScorer(NamedPlugin):
    __slots__ = ("threshold",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str = TYPE, threshold: int = DEFAULT_THRESHOLD) -> None:
        super().__init__(name)
        self.threshold = threshold

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        threshold = self.threshold
        return [0.5 * (1.0 - min(c.metrics.waiting_queue, threshold) / threshold) for c in candidates]


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> LoadAwareScorer:
    p = Params(TYPE, params)
    threshold = p.integer("threshold", DEFAULT_THRESHOLD, minimum=1)
    p.done()
    return LoadAwareScorer(name, threshold)
