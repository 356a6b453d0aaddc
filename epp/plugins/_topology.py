"""Topology comparison shared by ``topology-affinity-filter`` and ``-scorer`` (upstream's ``util/topology``).

:class:`Level` orders the tiers tightest first (same host implies same rack, zone and region);
:func:`common_level` is the tightest tier at which two topologies share a non-empty value. The peer
is the endpoint an earlier phase of the cycle picked (``PEER_ENDPOINT`` in the cycle state), its
topology read from the same producer as the candidates'. The producer is the plugin named by
``topologyProducerName``, else the one named ``topology-extractor``; none declared means no topology
(both plugins then have no effect, as upstream's optional dependency). A helper, not a plugin.
"""

from __future__ import annotations

import enum
from collections.abc import Callable

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import Plugin, PluginConfigError
from epp.framework.scheduling import PEER_ENDPOINT, CycleState
from epp.framework.topology import Topology, TopologyProducer

__all__ = ["Level", "TopologyReader", "common_level"]

DEFAULT_PRODUCER = "topology-extractor"


class Level(enum.IntEnum):
    HOST = 0
    RACK = 1
    ZONE = 2
    REGION = 3
    NONE = 4


def common_level(peer: Topology, candidate: Topology) -> Level:
    """The tightest tier both share (a value "" never matches)."""
    if peer.hostname and peer.hostname == candidate.hostname:
        return Level.HOST
    if peer.rack and peer.rack == candidate.rack:
        return Level.RACK
    if peer.zone and peer.zone == candidate.zone:
        return Level.ZONE
    if peer.region and peer.region == candidate.region:
        return Level.REGION
    return Level.NONE


class TopologyReader:
    """One plugin's view of its topology producer, resolved once the configuration's plugins exist."""

    __slots__ = ("_explicit", "_name", "_type", "producer")

    def __init__(self, type_name: str, p: Params) -> None:
        self._type = type_name
        explicit = p.text("topologyProducerName") or ""
        self._name = explicit or DEFAULT_PRODUCER
        self._explicit = bool(explicit)
        self.producer: TopologyProducer | None = None

    def resolve(self, lookup: Callable[[str, str], Plugin]) -> None:
        where = f"{self._type}.parameters.topologyProducerName"
        try:
            plugin = lookup(where, self._name)
        except ValueError:
            if self._explicit:
                raise
            return  # no topology-extractor declared: no topology, as upstream's optional dependency
        if not isinstance(plugin, TopologyProducer):
            raise PluginConfigError(
                f"topologyProducerName: plugin {self._name!r} (type {plugin.typed_name.type!r}) "
                "is not a topology-extractor"
            )
        self.producer = plugin

    def of(self, state: EndpointState) -> Topology | None:
        producer = self.producer
        return producer.topology(state) if producer is not None else None

    def peer(self, cycle: CycleState) -> Topology | None:
        """The peer's topology, or None (no peer, no producer, or a peer with no topology)."""
        peer = cycle.get(PEER_ENDPOINT)
        return self.of(peer) if isinstance(peer, EndpointState) else None
