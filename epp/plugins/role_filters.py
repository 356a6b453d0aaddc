"""prefill-filter, decode-filter, encode-filter: keep the pods whose ``llm-d.ai/role`` serves the stage.

Upstream's role filters (llm-d router ``filter/bylabel/roles.go``), without parameters:

- ``decode-filter``: ``decode``, ``prefill-decode``, ``both``, ``encode-prefill-decode``, and pods
  without the label (an unlabelled, aggregated pool keeps routing);
- ``prefill-filter``: ``prefill``, ``encode-prefill``, ``prefill-decode``, ``both``,
  ``encode-prefill-decode``;
- ``encode-filter``: ``encode``, ``encode-prefill``, ``encode-prefill-decode``.

Values match exactly: an empty or unknown value is kept by none of them. An empty result fails
the profile ("no endpoints available"), which for a prefill profile means the request is decoded
without a remote prefill.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginFactory, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.roles import DECODE_SELECTOR, ENCODE_SELECTOR, PREFILL_SELECTOR, RoleSelector
from epp.framework.scheduling import CycleState

__all__ = [
    "DECODE_TYPE",
    "ENCODE_TYPE",
    "PREFILL_TYPE",
    "RoleFilter",
    "create_decode",
    "create_encode",
    "create_prefill",
]

DECODE_TYPE = "decode-filter"
PREFILL_TYPE = "prefill-filter"
ENCODE_TYPE = "encode-filter"


class RoleFilter(NamedPlugin):
    """Keeps the candidates whose role label the stage's selector accepts."""

    __slots__ = ("_selector",)
    kinds = frozenset({PluginKind.FILTER})

    def __init__(self, name: str, selector: RoleSelector) -> None:
        super().__init__(name)
        self._selector = selector

    def filter(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> list[EndpointState]:
        accepts = self._selector.accepts
        return [c for c in candidates if accepts(c.endpoint.labels)]


class DecodeFilter(RoleFilter):
    __slots__ = ()
    plugin_type = DECODE_TYPE


class PrefillFilter(RoleFilter):
    __slots__ = ()
    plugin_type = PREFILL_TYPE


class EncodeFilter(RoleFilter):
    __slots__ = ()
    plugin_type = ENCODE_TYPE


def _factory(cls: type[RoleFilter], selector: RoleSelector) -> PluginFactory:
    def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> RoleFilter:
        Params(cls.plugin_type, parameters).done()
        return cls(name, selector)

    return create


create_decode = _factory(DecodeFilter, DECODE_SELECTOR)
create_prefill = _factory(PrefillFilter, PREFILL_SELECTOR)
create_encode = _factory(EncodeFilter, ENCODE_SELECTOR)
