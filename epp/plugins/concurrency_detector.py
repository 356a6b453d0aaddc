"""concurrency-detector: saturation from the picker's own count of requests in flight per endpoint.

Upstream's second saturation detector (``fw/saturationdetector/concurrency``): it reacts the
moment a request is routed, before any model-server metric moves. The pool's saturation is
``Σ in-flight / Σ maxConcurrency`` over the endpoints (no endpoints: 1.0). As a Filter (only when
a profile references it) it keeps endpoints whose in-flight count is below ``maxConcurrency *
(1 + headroom)``, with no fail-open: an empty result fails the profile, as upstream.

The count is kept through the request's life: +1 at PreRequest on the chosen endpoint, -1 when
the pipeline reports the request finished (PostResponse); a config reload hands the counts to the
new instance (``inherit``), so requests routed before it still count. Only ``concurrencyMode: requests`` is
implemented; ``tokens`` and ``hybrid`` need upstream's token estimator and are refused at load.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, Plugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult

__all__ = ["TYPE", "ConcurrencyDetector", "create"]

TYPE = "concurrency-detector"


class ConcurrencyDetector(NamedPlugin):
    """SaturationDetector + Filter + PreRequest + PostResponse over in-flight requests per endpoint."""

    plugin_type = TYPE
    kinds = frozenset(
        {PluginKind.SATURATION_DETECTOR, PluginKind.FILTER, PluginKind.PRE_REQUEST, PluginKind.POST_RESPONSE}
    )
    __slots__ = ("_inflight", "_limit", "max_concurrency")

    def __init__(self, name: str = TYPE, *, max_concurrency: int = 100, headroom: float = 0.0) -> None:
        super().__init__(name)
        self.max_concurrency = max_concurrency
        self._limit = max_concurrency * (1.0 + headroom)
        self._inflight: dict[str, int] = {}

    def inherit(self, previous: Plugin) -> None:
        """A reload: keep counting the requests the previous instance saw routed."""
        if isinstance(previous, ConcurrencyDetector):
            self._inflight = previous._inflight

    def inflight(self, endpoint_key: str) -> int:
        """Requests routed to ``endpoint_key`` and not finished yet."""
        return self._inflight.get(endpoint_key, 0)

    def saturation(self, candidates: Sequence[EndpointState], now: float) -> float:
        if not candidates:
            return 1.0
        inflight = self._inflight
        load = sum(inflight.get(c.endpoint.key, 0) for c in candidates)
        return load / (self.max_concurrency * len(candidates))

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        inflight, limit = self._inflight, self._limit
        return [c for c in candidates if inflight.get(c.endpoint.key, 0) < limit]

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        targets = result.primary.targets
        if targets:
            key = targets[0].endpoint.key
            self._inflight[key] = self._inflight.get(key, 0) + 1

    def post_response(self, request: InferenceRequest, endpoint: EndpointState | None) -> None:
        if endpoint is None:
            return
        key = endpoint.endpoint.key
        count = self._inflight.get(key, 0) - 1
        if count > 0:
            self._inflight[key] = count
        else:
            self._inflight.pop(key, None)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> ConcurrencyDetector:
    params = Params(TYPE, parameters)
    mode = params.choice("concurrencyMode", "requests", ["requests", "tokens", "hybrid"])
    max_concurrency = params.integer("maxConcurrency", 100, minimum=1)
    params.integer("maxTokenConcurrency", 1_000_000, minimum=1)  # validated as upstream; used by token modes only
    headroom = params.number("headroom", 0.0, minimum=0.0)
    params.done()
    if mode != "requests":
        raise PluginConfigError(
            f"{TYPE}.parameters.concurrencyMode: {mode!r} is not implemented here (it needs upstream's token "
            "estimator); use 'requests'"
        )
    return ConcurrencyDetector(name, max_concurrency=max_concurrency, headroom=headroom)
