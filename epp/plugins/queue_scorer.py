"""queue-scorer: prefer endpoints with short waiting queues, relative to the other candidates.

score = (maxQ - q) / (maxQ - minQ) over the candidates of this cycle, so the shortest queue
scores 1 and the longest 0; when every queue is equal all score 1 (upstream ``queuedepth``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._normalise import inverted_min_max

__all__ = ["TYPE", "QueueScorer", "create"]

TYPE = "queue-scorer"


class QueueScorer(NamedPlugin):
    """Min-max normalised waiting queue, inverted."""

    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        return inverted_min_max([c.metrics.waiting_queue for c in candidates])


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> QueueScorer:
    Params(TYPE, parameters).done()
    return QueueScorer(name)
