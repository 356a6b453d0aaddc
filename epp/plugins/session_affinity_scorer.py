"""session-affinity-scorer: keep a client's session on the endpoint that served it before.

Stateless, as llm-d's: the response carries a token (``x-session-token`` by default) that
encodes the chosen endpoint; a client that sends it back scores 1.0 on that endpoint and 0
elsewhere, so the weighted sum still lets load win when the sticky pod is saturated. A token
for an endpoint that left the pool simply matches nothing.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult

__all__ = ["SessionAffinityScorer", "decode_token", "encode_token"]

TYPE = "session-affinity-scorer"
DEFAULT_HEADER = "x-session-token"


def encode_token(endpoint_key: str) -> str:
    return base64.urlsafe_b64encode(endpoint_key.encode()).decode().rstrip("=")


def decode_token(token: str) -> str | None:
    """The endpoint key inside a token, or None for anything that is not one of ours."""
    try:
        key = base64.b64decode(token + "=" * (-len(token) % 4), altchars=b"-_", validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return key or None


class SessionAffinityScorer(NamedPlugin):
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def __init__(self, name: str, *, header: str = DEFAULT_HEADER) -> None:
        super().__init__(name)
        self.header = header.lower()

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        token = request.headers.get(self.header)
        key = decode_token(token) if token else None
        if key is None:
            return [0.0] * len(candidates)
        return [1.0 if c.endpoint.key == key else 0.0 for c in candidates]

    def response_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]:
        targets = result.primary.targets
        return {self.header: encode_token(targets[0].endpoint.key)} if targets else {}


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> SessionAffinityScorer:
    p = Params(TYPE, params)
    header = p.string("headerName", DEFAULT_HEADER)
    p.done()
    return SessionAffinityScorer(name, header=header)
