"""Where the decode pod's sidecar must go first: the stage headers, and the deprecated handler that only sets them.

``x-prefiller-host-port`` names the prefill profile's first pick (``ip:port``);
``x-encoder-hosts-ports`` every pick of the encode profile, comma-separated. A stage that did not
run, or found no endpoint, sets nothing; a copy the client sent is always removed, so the sidecar
only ever acts on the picker's decision (llm-d router ``disagg_headers_handler.go``).

``disagg-profile-handler`` sets them itself. ``disagg-headers-handler`` (and its older name
``prefill-header-handler``; parameters ``prefillProfile`` and ``encodeProfile``, defaults
``prefill`` and ``encode``) is upstream's deprecated separate plugin, still needed beside the
deprecated ``pd-profile-handler``, which sets no header of its own. Upstream runs it as a
PreRequest plugin; here it contributes the headers to the routing decision, so Explain shows them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from epp.framework import headers
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import SchedulingResult

__all__ = ["ALIAS_TYPE", "STAGE_HEADERS", "TYPE", "DisaggHeadersHandler", "create", "create_alias", "stage_headers"]

log = logging.getLogger(__name__)

TYPE = "disagg-headers-handler"
ALIAS_TYPE = "prefill-header-handler"

STAGE_HEADERS = frozenset({headers.PREFILLER_HOST_PORT, headers.ENCODER_HOSTS_PORTS})


def stage_headers(result: SchedulingResult, prefill_profile: str, encode_profile: str) -> dict[str, str]:
    """The headers naming the prefill pick and the encode picks of ``result`` (none for a stage that did not run)."""
    out: dict[str, str] = {}
    prefill = result.profile_results.get(prefill_profile)
    if prefill is not None and prefill.targets:
        out[headers.PREFILLER_HOST_PORT] = prefill.targets[0].endpoint.hostport
    encode = result.profile_results.get(encode_profile)
    if encode is not None and encode.targets:
        out[headers.ENCODER_HOSTS_PORTS] = ",".join(t.endpoint.hostport for t in encode.targets)
    return out


class DisaggHeadersHandler(NamedPlugin):
    """Sets the stage headers from the results of two named profiles."""

    __slots__ = ("encode_profile", "prefill_profile")
    plugin_type = TYPE

    def __init__(self, name: str, *, prefill_profile: str = "prefill", encode_profile: str = "encode") -> None:
        super().__init__(name)
        self.prefill_profile = prefill_profile
        self.encode_profile = encode_profile

    @property
    def owned_upstream_headers(self) -> frozenset[str]:
        return STAGE_HEADERS

    def upstream_headers(self, request: InferenceRequest, result: SchedulingResult) -> Mapping[str, str]:
        return stage_headers(result, self.prefill_profile, self.encode_profile)


def _build(type_name: str, name: str, parameters: Mapping[str, Any]) -> DisaggHeadersHandler:
    p = Params(type_name, parameters)
    prefill = p.text("prefillProfile") or "prefill"
    encode = p.text("encodeProfile") or "encode"
    p.done()
    return DisaggHeadersHandler(name, prefill_profile=prefill, encode_profile=encode)


def create(name: str, parameters: Mapping[str, Any], context: PluginContext) -> DisaggHeadersHandler:
    return _build(TYPE, name, parameters)


def create_alias(name: str, parameters: Mapping[str, Any], context: PluginContext) -> DisaggHeadersHandler:
    """``prefill-header-handler``: the same plugin under its older name (its type reads ``disagg-headers-handler``)."""
    return _build(ALIAS_TYPE, name, parameters)
