"""latency-slo-admitter: refuse sheddable requests that no endpoint can serve within their SLOs.

The llm-d router's ``requestcontrol/admitter/latencyslo`` (an admission plugin: after the data
producers, before scheduling). It admits at once a request of priority ≥ 0, one with no objective
(neither SLO header > 0) and any request when no candidate has a prediction (fail open). Otherwise
it admits when some candidate is predicted to meet both objectives, is idle (the engine runs no
request: upstream's code reads the scraped running count, though its README says the dispatched
count), or is cold (KV-cache use < 2%, where predictions are least reliable); else it refuses,
as upstream: HTTP 500, ``inference error: Internal - request cannot be admitted: no valid endpoint
available to serve the request``, with no ``x-llm-d-request-dropped-reason`` header (upstream sets
none on this path).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from epp.framework import headers
from epp.framework.admission import Denial
from epp.framework.endpoint import EndpointState
from epp.framework.latency import slo_ms
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.plugins._latency_source import LatencySource

__all__ = ["REFUSAL", "TYPE", "LatencySloAdmitter", "create"]

TYPE = "latency-slo-admitter"
REFUSAL = Denial("", "no valid endpoint available to serve the request")
_COLD_KV = 0.02


class LatencySloAdmitter(NamedPlugin):
    __slots__ = ("source",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.ADMITTER})

    def __init__(self, name: str, source: LatencySource) -> None:
        super().__init__(name)
        self.source = source

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        self.source.resolve(lookup)

    def admit(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> Denial | None:
        if request.priority >= 0:
            return None
        if slo_ms(request.headers, headers.TTFT_SLO) <= 0 and slo_ms(request.headers, headers.TPOT_SLO) <= 0:
            return None
        predictions = self.source.read(request)
        if predictions is None:
            return None
        predicted = False
        for candidate in candidates:
            metrics = candidate.metrics
            if metrics.kv_cache_usage < _COLD_KV or metrics.running == 0:
                return None
            info = predictions.of(candidate)
            if info is not None:
                predicted = True
                if info.valid:
                    return None
        return REFUSAL if predicted else None


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> LatencySloAdmitter:
    p = Params(TYPE, parameters)
    source = LatencySource(TYPE, p)
    p.done()
    return LatencySloAdmitter(name, source)
