"""session-affinity-scorer: prefer the endpoint a client's session was served by (a soft preference).

The llm-d router's scorer, both strategies (``epp/plugins/_session.py``): the candidate the session
is pinned to scores 1.0, every other 0, so the weighted sum still lets load win when the sticky pod
is saturated; no session, an unbound one, or one whose endpoint left the candidates scores 0
everywhere. With ``encoded_endpoint_header`` the response carries the token of the endpoint chosen
now; with ``session_id`` the binding is made when the request is routed (PreRequest). ``headerName``
(this picker's parameter before upstream's ``encodedEndpointHeaderConfig.header``) is still read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._session import SessionPlugin, session_affinity

__all__ = ["TYPE", "SessionAffinityScorer", "create"]

TYPE = "session-affinity-scorer"


class SessionAffinityScorer(SessionPlugin):
    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER, PluginKind.PRE_REQUEST})

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        chosen = self.session.chosen(cycle, request, candidates)
        return [1.0 if c is chosen else 0.0 for c in candidates]


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> SessionAffinityScorer:
    return SessionAffinityScorer(name, session_affinity(TYPE, name, params, context.clock, legacy_header=True))
