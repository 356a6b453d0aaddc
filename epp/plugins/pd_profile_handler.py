"""pd-profile-handler (deprecated upstream since v0.7): decode, then prefill when its decider says so.

The llm-d router's older P/D handler, still loaded: ``decodeProfile`` (``decode``),
``prefillProfile`` (``prefill``), ``deciderPluginName`` (``prefix-based-pd-decider``; the plugin
must exist), ``primaryPort`` (0; else the data-parallel rewrite of ``data_parallel.py``: the
request goes to the decode pick's pod on that port and the rank is named in
``x-data-parallel-host-port``). ``prefixPluginType``, ``prefixPluginName`` and
``prefixMatchInfoProducerName`` are accepted and change nothing, as upstream (the decider reads
whatever prefix-cache scoring found for the decode pick).

It differs from ``disagg-profile-handler`` as upstream's does: no encode stage; it sets no
``x-prefiller-host-port`` itself (configurations pair it with ``prefill-header-handler``), though
it removes a client's copy; its decision is counted in ``llm_d_epp_pd_decision_total``, and a
decider's "yes" counts as ``prefill-decode`` even when the prefill profile then finds no pod.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from typing import Any

from epp.framework.disaggregation import PREFILL_DECODE
from epp.framework.params import Params
from epp.framework.plugin import Plugin, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.roles import Stage
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.plugins.data_parallel import RANK_HEADERS, primary_port, rank_header
from epp.plugins.disagg_headers import STAGE_HEADERS
from epp.plugins.disagg_profile_handler import DisaggProfileHandler, StageProfiles, resolve_decider
from epp.plugins.pd_deciders import PREFIX_BASED_TYPE

__all__ = ["TYPE", "PdProfileHandler", "create"]

log = logging.getLogger(__name__)

TYPE = "pd-profile-handler"
_NO_ENCODE = ""  # no profile has an empty name: the encode stage never runs


class PdProfileHandler(DisaggProfileHandler):
    __slots__ = ("_decider_name", "port")
    plugin_type = TYPE

    def __init__(self, name: str, *, profiles: StageProfiles, decider: str, port: int = 0) -> None:
        super().__init__(name, profiles=profiles)
        self._decider_name = decider
        self.port = port

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        self.prefill_decider = resolve_decider(lookup, f"{TYPE}.parameters.deciderPluginName", self._decider_name)

    def process_results(
        self, cycle: CycleState, request: InferenceRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        result = super().process_results(cycle, request, results)
        decision = result.disaggregation
        if decision is None:
            return result
        verdict = self._run(cycle).verdicts.get(Stage.PREFILL)
        if verdict is not None and verdict[1].disaggregate:
            decision = dataclasses.replace(decision, decision_type=PREFILL_DECODE)
        result.disaggregation = dataclasses.replace(decision, metric="pd")
        result.target_port = self.port
        return result

    @property
    def owned_upstream_headers(self) -> frozenset[str]:
        return STAGE_HEADERS | RANK_HEADERS

    def upstream_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]:
        return rank_header(result)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> PdProfileHandler:
    p = Params(TYPE, parameters)
    profiles = StageProfiles(
        decode=p.text("decodeProfile") or "decode",
        prefill=p.text("prefillProfile") or "prefill",
        encode=_NO_ENCODE,
    )
    decider = p.text("deciderPluginName") or PREFIX_BASED_TYPE
    port = primary_port(p, TYPE, 0)
    for unused in ("prefixPluginType", "prefixPluginName", "prefixMatchInfoProducerName"):
        p.text(unused)
    p.done()
    return PdProfileHandler(name, profiles=profiles, decider=decider, port=port)
