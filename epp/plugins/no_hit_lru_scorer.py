"""no-hit-lru-scorer: spread cold requests (no prefix-cache hit anywhere) over the least recently cold-used pods.

The llm-d router's ``scheduling/scorer/nohitlru``. A request is cold when no candidate holds any
of its prompt blocks (prefix-match info: ``epp/plugins/_prefix_match.py``). Warm requests score 0.5
everywhere (prefix affinity decides). Cold ones rank the candidates: those never sent a cold request
first, then the others least recently sent one first; the i-th of n scores ``1 − i/(n−1)`` (a lone
candidate 1.0). When a cold request is routed (PreRequest), its primary profile's endpoint, and the
``prefill`` profile's when it ran, become the most recently used. The LRU holds ``lruSize`` (1024)
endpoints; one that leaves the pool is forgotten. ``prefixPluginType`` and ``prefixPluginName`` are
accepted and unused, as upstream (deprecated there, never used).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from epp.framework.data import DataScope, Dependencies
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.plugins._prefix_match import PrefixMatchReader

__all__ = ["TYPE", "NoHitLruScorer", "create"]

TYPE = "no-hit-lru-scorer"
_PREFILL_PROFILE = "prefill"  # upstream's hard-coded prefill profile name


class NoHitLruScorer(NamedPlugin):
    __slots__ = ("_cold_key", "_lru", "lru_size", "reader")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER, PluginKind.PRE_REQUEST})

    def __init__(self, name: str, reader: PrefixMatchReader, lru_size: int = 1024) -> None:
        super().__init__(name)
        self.reader = reader
        self.lru_size = lru_size
        self._lru: OrderedDict[str, None] = OrderedDict()
        """Endpoint keys, least recently sent a cold request first."""
        self._cold_key = f"{TYPE}/{name}/cold"

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        info = self.reader.match(request, candidates)
        cold = info is None or not any(info.match_blocks)
        cycle[self._cold_key] = cold
        if not cold:
            return [0.5] * len(candidates)
        n = len(candidates)
        if n <= 1:
            return [1.0] * n
        positions = {key: i for i, key in enumerate(self._lru)}
        never = [c for c in candidates if c.endpoint.key not in positions]
        rank = {id(c): i for i, c in enumerate(never)}
        scores: list[float] = []
        for c in candidates:
            position = positions.get(c.endpoint.key)
            r = rank[id(c)] if position is None else len(never) + position
            scores.append(max(0.0, 1.0 - r / (n - 1)))
        return scores

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        if not cycle.get(self._cold_key):
            return
        for name in (result.primary_profile, _PREFILL_PROFILE):
            profile = result.profile_results.get(name)
            if profile is not None and profile.targets:
                self._used(profile.targets[0].endpoint.key)

    def _used(self, key: str) -> None:
        lru = self._lru
        lru[key] = None
        lru.move_to_end(key)
        while len(lru) > self.lru_size:
            lru.popitem(last=False)

    def endpoints_removed(self, keys: Collection[str]) -> None:
        for key in keys:
            self._lru.pop(key, None)

    def consumes(self) -> Dependencies:
        return self.reader.dependencies()

    def bind_data_scope(self, scope: DataScope) -> None:
        self.reader.scope = scope


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> NoHitLruScorer:
    p = Params(TYPE, params)
    p.text("prefixPluginType")
    p.text("prefixPluginName")
    lru_size = p.integer("lruSize", 1024, minimum=1)
    reader = PrefixMatchReader(p)
    p.done()
    return NoHitLruScorer(name, reader, lru_size)
