"""Finding the predictions the SLO plugins read (latency scorer, headroom tier filter, SLO admitter).

Upstream's plugins read the ``LatencyPredictionInfo`` endpoint attribute of the producer named by
``latencyPredictionInfoProducerName``, else of the default producer. Here: the
``predicted-latency-producer`` plugin of that name, else the one named ``predicted-latency-producer``
(its name when declared without one). A configuration without it is refused at load, naming what
to declare. A helper, not a plugin.
"""

from __future__ import annotations

from collections.abc import Callable

from epp.framework.latency import LatencyPredictions
from epp.framework.params import Params
from epp.framework.plugin import Plugin, PluginConfigError
from epp.framework.request import InferenceRequest

__all__ = ["PRODUCER_TYPE", "LatencySource"]

PRODUCER_TYPE = "predicted-latency-producer"


class LatencySource:
    """One plugin's source of predictions, checked once the configuration's plugins exist."""

    __slots__ = ("_type", "name")

    def __init__(self, type_name: str, p: Params) -> None:
        self._type = type_name
        self.name = p.text("latencyPredictionInfoProducerName") or PRODUCER_TYPE

    def resolve(self, lookup: Callable[[str, str], Plugin]) -> None:
        where = f"{self._type}.parameters.latencyPredictionInfoProducerName"
        try:
            plugin = lookup(where, self.name)
        except ValueError:
            raise PluginConfigError(
                f"{where}: {self._type} reads latency predictions and no plugin {self.name!r} makes them: "
                f"declare a {PRODUCER_TYPE}"
            ) from None
        if plugin.typed_name.type != PRODUCER_TYPE:
            raise PluginConfigError(
                f"{where}: plugin {self.name!r} (type {plugin.typed_name.type!r}) makes no latency predictions"
            )

    def read(self, request: InferenceRequest) -> LatencyPredictions | None:
        """The request's predictions; None when the producer made none (the plugin falls back)."""
        predictions = LatencyPredictions.read(request, self.name)
        return predictions if predictions is not None and predictions.by_endpoint else None
