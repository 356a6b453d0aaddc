"""kv-cache-utilization-scorer: prefer endpoints with free KV cache.

score = 1 - KV-cache use (0..1 as the model server reports it); the profile runner clamps it, so a
server reporting more than 100 % scores 0 rather than a negative number.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState

__all__ = ["TYPE", "KvCacheUtilizationScorer", "create"]

TYPE = "kv-cache-utilization-scorer"


class KvCacheUtilizationScorer(NamedPlugin):
    """One minus KV-cache utilisation."""

    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER})

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        return [1.0 - c.metrics.kv_cache_usage for c in candidates]


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> KvCacheUtilizationScorer:
    Params(TYPE, parameters).done()
    return KvCacheUtilizationScorer(name)
