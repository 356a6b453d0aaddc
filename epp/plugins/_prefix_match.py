"""Finding the prefix-match info a plugin reads (``no-hit-lru-scorer``, ``prefix-cache-affinity-filter``).

Upstream's plugins read the ``PrefixCacheMatchInfo`` endpoint attribute of the producer named by
``prefixMatchInfoProducerName``, else of ``approx-prefix-cache-producer``, which the router creates
when nothing produces it. Here: the plugin named by ``prefixMatchInfoProducerName`` (a
``precise-prefix-cache-producer``, or a ``prefix-cache-scorer``, whose approximate index is
upstream's approximate producer), else the plugin named ``approx-prefix-cache-producer``, else the
one named ``prefix-cache-scorer`` (its name when declared without one, as in upstream's samples).
A configuration with none of them is refused at load, naming what to declare: this picker does not
create a producer by itself. A helper, not a plugin.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import Plugin, PluginConfigError
from epp.framework.producers import PrefixMatchInfo, PrefixMatchInfoProducer
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["PrefixMatchReader"]

_DEFAULTS = ("approx-prefix-cache-producer", "prefix-cache-scorer")


class PrefixMatchReader:
    """One plugin's source of prefix-match info, resolved once the configuration's plugins exist."""

    __slots__ = ("_name", "_type", "producer")

    def __init__(self, type_name: str, p: Params) -> None:
        self._type = type_name
        self._name = p.text("prefixMatchInfoProducerName") or ""
        self.producer: PrefixMatchInfoProducer | None = None

    def resolve(self, lookup: Callable[[str, str], Plugin]) -> None:
        where = f"{self._type}.parameters.prefixMatchInfoProducerName"
        if self._name:
            self.producer = _producer(lookup(where, self._name), self._name)
            return
        for name in _DEFAULTS:
            try:
                plugin = lookup(where, name)
            except ValueError:
                continue
            self.producer = _producer(plugin, name)
            return
        raise PluginConfigError(
            f"prefixMatchInfoProducerName: {self._type} reads prefix-match info, and nothing produces it: declare a "
            "prefix-cache-scorer (its approximate index), or name a precise-prefix-cache-producer here"
        )

    def match(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> PrefixMatchInfo | None:
        producer = self.producer
        return producer.prefix_match(cycle, request, candidates) if producer is not None else None


def _producer(plugin: Plugin, name: str) -> PrefixMatchInfoProducer:
    if not isinstance(plugin, PrefixMatchInfoProducer):
        raise PluginConfigError(
            f"prefixMatchInfoProducerName: plugin {name!r} (type {plugin.typed_name.type!r}) "
            "produces no prefix-match info"
        )
    return plugin
