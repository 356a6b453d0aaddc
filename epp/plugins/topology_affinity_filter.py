"""topology-affinity-filter: keep the candidates co-located with the peer endpoint at ``minAffinity`` or tighter.

The llm-d router's ``scheduling/filter/topologyaffinity``: for a disaggregated request, the profile
handler picks the decode endpoint first and publishes it as the peer (``PEER_ENDPOINT``); in the
``prefill`` profile this filter keeps the candidates sharing its ``host`` (the default), ``rack``,
``zone`` or ``region`` (each tier includes the tighter ones). It fails open: with no peer topology,
or when no candidate is close enough, every candidate is kept. A candidate with no topology is
dropped (unless that empties the set). Topologies come from ``topology-extractor``
(``topologyProducerName``; ``epp/plugins/_topology.py``). Upstream registers it Alpha.
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

__all__ = ["TYPE", "TopologyAffinityFilter", "create"]

TYPE = "topology-affinity-filter"
_LEVELS = ("host", "rack", "zone", "region")


class TopologyAffinityFilter(NamedPlugin):
    __slots__ = ("min_affinity", "reader")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER})

    def __init__(self, name: str, reader: TopologyReader, min_affinity: Level = Level.HOST) -> None:
        super().__init__(name)
        self.reader = reader
        self.min_affinity = min_affinity

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        reader = self.reader
        peer = reader.peer(cycle)
        if peer is None:
            return list(candidates)
        kept = []
        for c in candidates:
            own = reader.of(c)
            if own is not None and common_level(peer, own) <= self.min_affinity:
                kept.append(c)
        return kept or list(candidates)

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        self.reader.resolve(lookup)


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> TopologyAffinityFilter:
    p = Params(TYPE, params)
    level = p.choice("minAffinity", "host", _LEVELS)
    reader = TopologyReader(TYPE, p)
    p.done()
    return TopologyAffinityFilter(name, reader, Level(_LEVELS.index(level)))
