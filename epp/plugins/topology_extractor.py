"""topology-extractor: each endpoint's host, rack, zone and region, from its pod's labels.

The llm-d router's ``datalayer/extractor/topology``: the label read for each field is a
parameter (``hostname``: ``kubernetes.io/hostname``, ``rack``: ``topology.kubernetes.io/rack``,
``zone``: ``topology.kubernetes.io/zone``, ``region``: ``topology.kubernetes.io/region`` by
default). An endpoint with none of them has no topology. Kept per endpoint from the moment it
joins (and replaced when its pod changes) until it leaves, as upstream's endpoint-event extractor;
it may be wired under an ``endpoint-notification-source`` or simply declared (upstream creates
that source itself). Differs from upstream: a pod without the hostname label gets no hostname,
where upstream falls back to the pod's ``spec.hostname`` (which this picker does not read).
Upstream registers it Alpha.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext
from epp.framework.topology import Topology

__all__ = ["TYPE", "TopologyExtractor", "create"]

TYPE = "topology-extractor"
_DEFAULT_LABELS = (
    ("hostname", "kubernetes.io/hostname"),
    ("rack", "topology.kubernetes.io/rack"),
    ("zone", "topology.kubernetes.io/zone"),
    ("region", "topology.kubernetes.io/region"),
)


class TopologyExtractor(NamedPlugin):
    """Endpoint key → :class:`Topology`, learned as endpoints join and forgotten as they leave."""

    __slots__ = ("_known", "labels")
    plugin_type = TYPE

    def __init__(self, name: str = TYPE, labels: tuple[str, str, str, str] | None = None) -> None:
        super().__init__(name)
        self.labels = labels or tuple(label for _, label in _DEFAULT_LABELS)
        self._known: dict[str, Topology] = {}

    def topology(self, state: EndpointState) -> Topology | None:
        return self._known.get(state.endpoint.key)

    def endpoints_added(self, states: Sequence[EndpointState]) -> None:
        host, rack, zone, region = self.labels
        for state in states:
            labels = state.endpoint.labels
            found = Topology(labels.get(host, ""), labels.get(rack, ""), labels.get(zone, ""), labels.get(region, ""))
            if found == Topology():
                self._known.pop(state.endpoint.key, None)
            else:
                self._known[state.endpoint.key] = found

    def endpoints_removed(self, keys: Collection[str]) -> None:
        for key in keys:
            self._known.pop(key, None)


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> TopologyExtractor:
    p = Params(TYPE, params)
    labels = tuple(p.text(field) or default for field, default in _DEFAULT_LABELS)
    p.done()
    host, rack, zone, region = labels
    return TopologyExtractor(name, (host, rack, zone, region))
