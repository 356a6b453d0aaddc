"""Where an endpoint runs, for topology-aware routing: upstream's ``Topology`` endpoint attribute.

A :class:`TopologyProducer` (``topology-extractor``) says, per endpoint, its host, rack, zone and
region (from pod labels); the topology affinity filter and scorer compare a candidate's with the
peer endpoint's (the one an earlier phase of the cycle picked: ``scheduling.PEER_ENDPOINT``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import TypedName

__all__ = ["Topology", "TopologyProducer"]


@dataclass(frozen=True, slots=True)
class Topology:
    """An endpoint's locality; "" for a field that is unknown (it never matches, not even another "")."""

    hostname: str = ""
    rack: str = ""
    zone: str = ""
    region: str = ""


@runtime_checkable
class TopologyProducer(Protocol):
    @property
    def typed_name(self) -> TypedName: ...

    def topology(self, state: EndpointState) -> Topology | None:
        """The endpoint's topology, or None when it has none (no field known)."""
        ...
