"""data-parallel-profile-handler (deprecated upstream): data-parallel ranks behind one primary port.

A vLLM pod running ``--data-parallel-size N`` serves rank ``r`` on port ``base + r``; the pool lists
every rank port (``targetPorts``), the picker keeps one endpoint per (pod, port) (``<pod>-rank-<r>``)
and, with ``single-profile-handler``, the gateway sends the request straight to the chosen
rank's port. Gateways that could not route to several ports of one pod (Istio before 1.28.1)
got this handler instead (llm-d router ``profilehandler/dataparallel``): it runs the one
profile, sends the request to the pick's pod on ``primaryPort`` (default 8000), and names the
chosen rank's ``ip:port`` in ``x-data-parallel-host-port``, where the decode sidecar's
listener on that port forwards it to the rank (``epp sidecar --data-parallel-size``). A client's
copy of the header is removed. The in-flight count and health feedback stay on the rank's
endpoint. Exactly one scheduling profile is required. ``primaryPort: 0`` rewrites nothing (upstream
would send the request to port 0).

The same header and port rewrite are what the deprecated ``pd-profile-handler`` does with its
``primaryPort``; :func:`rank_header` is shared.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from epp.errors import EppError, ErrorCode
from epp.framework import headers
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, ProfileResult, SchedulerProfileView, SchedulingResult

__all__ = ["RANK_HEADERS", "TYPE", "DataParallelProfileHandler", "create", "primary_port", "rank_header"]

log = logging.getLogger(__name__)

TYPE = "data-parallel-profile-handler"

RANK_HEADERS = frozenset({headers.DATA_PARALLEL_HOST_PORT})


def rank_header(result: SchedulingResult) -> dict[str, str]:
    """``x-data-parallel-host-port``: the rank the primary profile picked, when the port is rewritten."""
    if not result.target_port:
        return {}
    primary = result.profile_results.get(result.primary_profile)
    if primary is None or not primary.targets:
        return {}
    return {headers.DATA_PARALLEL_HOST_PORT: primary.targets[0].endpoint.hostport}


def primary_port(p: Params, plugin_type: str, default: int) -> int:
    """``primaryPort``: 0 (no rewrite) or a port number."""
    port = p.integer("primaryPort", default, minimum=0)
    if port > 65535:
        raise PluginConfigError(f"{plugin_type}.parameters.primaryPort: must be between 1 and 65535, got {port}")
    return port


class DataParallelProfileHandler(NamedPlugin):
    """Runs the one profile; the gateway goes to ``primaryPort``, the rank travels in a header."""

    __slots__ = ("port",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.PROFILE_HANDLER})

    def __init__(self, name: str, *, port: int = 8000) -> None:
        super().__init__(name)
        self.port = port

    def pick_profiles(
        self,
        cycle: CycleState,
        request: InferenceRequest,
        profiles: Mapping[str, SchedulerProfileView],
        results: Mapping[str, ProfileResult | None],
    ) -> list[str]:
        if len(profiles) != 1:
            raise EppError(
                ErrorCode.RESOURCE_EXHAUSTED,
                f"failed to find target endpoint: {TYPE} needs exactly one scheduling profile, got {len(profiles)}",
            )
        return [] if results else list(profiles)

    def process_results(
        self, cycle: CycleState, request: InferenceRequest, results: Mapping[str, ProfileResult | None]
    ) -> SchedulingResult:
        primary = next(iter(results), "")
        return SchedulingResult(profile_results=dict(results), primary_profile=primary, target_port=self.port)

    @property
    def owned_upstream_headers(self) -> frozenset[str]:
        return RANK_HEADERS

    def upstream_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]:
        return rank_header(result)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> DataParallelProfileHandler:
    p = Params(TYPE, parameters)
    port = primary_port(p, TYPE, 8000)
    p.done()
    return DataParallelProfileHandler(name, port=port)
