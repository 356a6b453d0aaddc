"""The in-flight load scorers: ``token-load-scorer`` and ``active-request-scorer`` (llm-d router).

Both read what the picker itself has in flight on each endpoint (``EndpointState``'s
``in_flight_tokens`` / ``in_flight_requests``, counted by the request pipeline from routing to
the end of the response), so a burst routed between two scrapes already counts:

- ``token-load-scorer``: ``1 − min(1, tokens / queueThresholdTokens)``; 0 tokens → 1, the
  threshold or more → 0. Parameter ``queueThresholdTokens`` (default 4,194,304: 128 requests of
  32K tokens), > 0.
- ``active-request-scorer``: requests ≤ ``idleThreshold`` (default 0) → 1; otherwise
  ``(maxCount − count) / maxCount × maxBusyScore`` (default 1.0, in [0, 1]), maxCount the
  busiest candidate's count.

Upstream's ``inFlightLoadProducerName`` (which producer's counts to read) and the deprecated
``requestTimeout`` are refused: this picker has one in-flight tracker and no request timeout here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = [
    "ACTIVE_REQUEST_TYPE",
    "TOKEN_LOAD_TYPE",
    "ActiveRequestScorer",
    "TokenLoadScorer",
    "create_active_request",
    "create_token_load",
]

TOKEN_LOAD_TYPE = "token-load-scorer"
ACTIVE_REQUEST_TYPE = "active-request-scorer"
_DEFAULT_THRESHOLD_TOKENS = 4_194_304


class TokenLoadScorer(NamedPlugin):
    """In-flight tokens against a fixed threshold."""

    __slots__ = ("threshold",)
    plugin_type = TOKEN_LOAD_TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str = "", *, threshold: int = _DEFAULT_THRESHOLD_TOKENS) -> None:
        super().__init__(name)
        self.threshold = threshold

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        threshold = self.threshold
        return [1.0 - min(1.0, max(0, c.in_flight_tokens) / threshold) for c in candidates]


class ActiveRequestScorer(NamedPlugin):
    """In-flight requests relative to the busiest candidate; idle endpoints score 1."""

    __slots__ = ("idle_threshold", "max_busy_score")
    plugin_type = ACTIVE_REQUEST_TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str = "", *, idle_threshold: int = 0, max_busy_score: float = 1.0) -> None:
        super().__init__(name)
        self.idle_threshold = idle_threshold
        self.max_busy_score = max_busy_score

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        counts = [c.in_flight_requests for c in candidates]
        busiest = max(counts, default=0)
        idle, top = self.idle_threshold, self.max_busy_score
        return [1.0 if n <= idle else (busiest - n) / busiest * top for n in counts]


def create_token_load(name: str, parameters: Mapping[str, Any], context: PluginContext) -> TokenLoadScorer:
    params = Params(TOKEN_LOAD_TYPE, parameters)
    threshold = params.integer("queueThresholdTokens", _DEFAULT_THRESHOLD_TOKENS, minimum=1)
    params.done()
    return TokenLoadScorer(name, threshold=threshold)


def create_active_request(name: str, parameters: Mapping[str, Any], context: PluginContext) -> ActiveRequestScorer:
    params = Params(ACTIVE_REQUEST_TYPE, parameters)
    idle = params.integer("idleThreshold", 0, minimum=0)
    top = params.number("maxBusyScore", 1.0, minimum=0.0, maximum=1.0)
    params.done()
    return ActiveRequestScorer(name, idle_threshold=idle, max_busy_score=top)
