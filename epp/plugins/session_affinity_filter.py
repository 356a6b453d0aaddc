"""session-affinity-filter: pin a client's session to the endpoint that served it (a hard constraint).

The llm-d router's filter (``scheduling/filter/sessionaffinity``), both strategies of
``epp/plugins/_session.py``: when the session's endpoint is a candidate, it is the only one kept;
with no session, an unbound one, or an endpoint no longer among the candidates, every candidate is
kept and the rest of the profile decides. It never empties the set. The response carries the token
(``encoded_endpoint_header``), or the binding is recorded when the request is routed
(``session_id``). Upstream registers it Alpha: ``--allow-experimental-plugins`` is needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState
from epp.plugins._session import SessionPlugin, session_affinity

__all__ = ["TYPE", "SessionAffinityFilter", "create"]

TYPE = "session-affinity-filter"


class SessionAffinityFilter(SessionPlugin):
    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.FILTER, PluginKind.PRE_REQUEST})

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        chosen = self.session.chosen(cycle, request, candidates)
        return [chosen] if chosen is not None else list(candidates)


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> SessionAffinityFilter:
    return SessionAffinityFilter(name, session_affinity(TYPE, name, params, context.clock))
