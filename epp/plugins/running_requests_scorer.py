"""running-requests-size-scorer: prefer endpoints running fewer requests, by the model server's own count.

score = (maxR - r) / (maxR - minR) over the candidates, ``r`` the scraped running-request count
(vLLM ``vllm:num_requests_running``); all equal → all 1 (the llm-d router's ``runningrequests``).
It reads the scrape, so it lags like the queue; the in-flight scorers (``inflight_scorers.py``)
do not.
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

__all__ = ["TYPE", "RunningRequestsScorer", "create"]

TYPE = "running-requests-size-scorer"


class RunningRequestsScorer(NamedPlugin):
    """Min-max normalised running requests, inverted."""

    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        return inverted_min_max([c.metrics.running for c in candidates])


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> RunningRequestsScorer:
    Params(TYPE, parameters).done()
    return RunningRequestsScorer(name)
