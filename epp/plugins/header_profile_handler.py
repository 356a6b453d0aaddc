"""header-profile-handler: run the one scheduling profile a request header names.

The llm-d router's ``scheduling/profilehandler/headerprofile``: for a caller that knows which stage
each call is for (the coordinator sends ``EPP-Profile: prefill``, then ``decode``). With one
profile configured it always runs; otherwise the profile named by the header (``headerName``,
default ``EPP-Profile``, read case-insensitively, the value trimmed and matched exactly) runs, or
``defaultProfile`` (default ``decode``) when the header is missing or blank. A value naming no
profile (or a missing default) runs nothing: the request fails as upstream's, 429 "failed to find
target endpoint" (upstream cannot carry a 400 through the scheduler either), and the reason is
logged. The profile that ran is the primary one. Upstream registers it Alpha.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulerProfileView, SchedulingResult

__all__ = ["TYPE", "HeaderProfileHandler", "create"]

TYPE = "header-profile-handler"
DEFAULT_HEADER = "epp-profile"
DEFAULT_PROFILE = "decode"
log = logging.getLogger(__name__)


class HeaderProfileHandler(NamedPlugin):
    __slots__ = ("default_profile", "header")
    plugin_type = TYPE
    kinds = frozenset({PluginKind.PROFILE_HANDLER})

    def __init__(
        self, name: str = TYPE, *, header: str = DEFAULT_HEADER, default_profile: str = DEFAULT_PROFILE
    ) -> None:
        super().__init__(name)
        self.header = header.strip().lower() or DEFAULT_HEADER
        self.default_profile = default_profile.strip() or DEFAULT_PROFILE

    def pick_profiles(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        profiles: Mapping[str, SchedulerProfileView],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        if results:  # the chosen profile has run
            return []
        if len(profiles) == 1:
            return list(profiles)
        asked = request.headers.get(self.header, "").strip()
        chosen = asked or self.default_profile
        if chosen in profiles:
            return [chosen]
        reason = (
            f"no scheduling profile configured for {self.header!r} header value {asked!r}"
            if asked
            else f"defaultProfile {self.default_profile!r} is not a configured scheduling profile"
        )
        log.info(
            "no scheduling profile selected for request",
            extra={"reason": reason, "request_id": request.request_id, "profiles": sorted(profiles)},
        )
        return []

    def process_results(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        results: Mapping[str, ProfileResult | None],
    ) -> SchedulingResult:
        return SchedulingResult(profile_results=dict(results), primary_profile=next(iter(results), ""))


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> HeaderProfileHandler:
    p = Params(TYPE, params)
    header = p.text("headerName") or ""
    default_profile = p.text("defaultProfile") or ""
    p.done()
    return HeaderProfileHandler(name, header=header, default_profile=default_profile)
