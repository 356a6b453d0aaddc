"""single-profile-handler: run the one scheduling profile once; it is the primary profile.

The loader guarantees a config using this handler has exactly one profile; the handler itself
only runs each profile once and names the first (only) result primary.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulerProfileView, SchedulingResult

__all__ = ["TYPE", "SingleProfileHandler", "create"]

TYPE = "single-profile-handler"


class SingleProfileHandler(NamedPlugin):
    """All profiles once, then stop; the primary is the first profile run."""

    __slots__ = ()
    plugin_type = TYPE
    kinds = frozenset({PluginKind.PROFILE_HANDLER})

    def pick_profiles(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        profiles: Mapping[str, SchedulerProfileView],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        if len(results) >= len(profiles):
            return []
        return list(profiles)

    def process_results(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        results: Mapping[str, ProfileResult | None],
    ) -> SchedulingResult:
        primary = next(iter(results), "")
        return SchedulingResult(profile_results=dict(results), primary_profile=primary)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> SingleProfileHandler:
    Params(TYPE, parameters).done()
    return SingleProfileHandler(name)
