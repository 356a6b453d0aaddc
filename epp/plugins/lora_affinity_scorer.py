"""lora-affinity-scorer: prefer endpoints where the requested LoRA adapter is already loaded.

Per endpoint, for the request's target model (the adapter name):
1.0 if it is an active adapter; else 0.8 if the server has a free adapter slot
(``len(active) + len(waiting) < max_adapters``); else 0.6 if it is waiting to load; else 0.
A base-model request scores the same on every endpoint of equal slot state, so it only breaks ties.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "LoraAffinityScorer", "create"]

TYPE = "lora-affinity-scorer"

ACTIVE = 1.0
HAS_ROOM = 0.8
WAITING = 0.6


class LoraAffinityScorer(NamedPlugin):
    """Adapter active > free slot > adapter waiting > none."""

    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        model = request.target_model or request.model
        scores: list[float] = []
        for c in candidates:
            m = c.metrics
            if model in m.active_adapters:
                scores.append(ACTIVE)
            elif len(m.active_adapters) + len(m.waiting_adapters) < m.max_adapters:
                scores.append(HAS_ROOM)
            elif model in m.waiting_adapters:
                scores.append(WAITING)
            else:
                scores.append(0.0)
        return scores


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> LoraAffinityScorer:
    Params(TYPE, parameters).done()
    return LoraAffinityScorer(name)
