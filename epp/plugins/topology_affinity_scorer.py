"""topology-affinity-scorer: score the candidates by how close they run to the peer endpoint.

The llm-d router's ``scheduling/scorer/topologyaffinity``: the tightest tier a candidate shares
with the peer (``PEER_ENDPOINT``, published by the profile handler) scores on upstream's fixed curve,
shaped by KV-transfer bandwidth: host 1.0, rack 0.2, zone 0.05, region 0.02, none 0. With no peer
topology, or for a candidate without topology, the score is 0. Topologies come from
``topology-extractor`` (``topologyProducerName``; ``epp/plugins/_topology.py``). Upstream registers
it Alpha.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._topology import Level, TopologyReader, common_level

__all__ = ["LEVEL_SCORES", "TYPE", "TopologyAffinityScorer", "create"]

TYPE = "topology-affinity-scorer"
LEVEL_SCORES: Mapping[Level, float] = {
    Level.HOST: 1.0,
    Level.RACK: 0.2,
    Level.ZONE: 0.05,
    Level.REGION: 0.02,
    Level.NONE: 0.0,
}


class TopologyAffinityScorer(NamedPlugin):
    __slots__ = ("reader",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str, reader: TopologyReader) -> None:
        super().__init__(name)
        self.reader = reader

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        reader = self.reader
        peer = reader.peer(cycle)
        if peer is None:
            return [0.0] * len(candidates)
        scores = []
        for c in candidates:
            own = reader.of(c)
            scores.append(0.0 if own is None else LEVEL_SCORES[common_level(peer, own)])
        return scores

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        self.reader.resolve(lookup)


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> TopologyAffinityScorer:
    p = Params(TYPE, params)
    reader = TopologyReader(TYPE, p)
    p.done()
    return TopologyAffinityScorer(name, reader)
