"""The gateway's subset hint: which endpoints a request may go to, read from its ext_proc metadata.

A gateway that already narrowed the pool (an Istio destination rule, a retry that must avoid the
endpoint that failed) passes the allowed ``ip:port`` list under the ``envoy.lb.subset_hint``
namespace, key ``x-gateway-destination-endpoint-subset``. Candidates are matched by IP, so ports
are stripped and IPv6 brackets removed. Anything else in that place is ignored, as upstream does.
"""

from __future__ import annotations

from collections.abc import Iterable

from epp.extproc import pb
from epp.framework.headers import DESTINATION_ENDPOINT_SUBSET, SUBSET_HINT_NAMESPACE

__all__ = ["subset_hint", "subset_ips"]


def _ip_of(hostport: str) -> str:
    if hostport.startswith("["):
        end = hostport.find("]")
        return hostport[1:end] if end > 0 else hostport[1:]
    if hostport.count(":") != 1:
        return hostport  # A bare IPv4 or IPv6 address: no port to strip.
    return hostport.rpartition(":")[0]


def subset_ips(items: Iterable[str]) -> frozenset[str]:
    """The IPs of an Envoy subset hint (``ip:port`` / ``[v6]:port``): port stripped, brackets removed."""
    return frozenset(_ip_of(item) for item in items)


def subset_hint(message: pb.ProcessingRequest) -> frozenset[str] | None:
    """The IPs the message's metadata allows, or None when it carries no (well-formed) hint."""
    if not message.HasField("metadata_context"):
        return None
    namespaces = message.metadata_context.filter_metadata
    if SUBSET_HINT_NAMESPACE not in namespaces:
        return None
    fields = namespaces[SUBSET_HINT_NAMESPACE].fields
    if DESTINATION_ENDPOINT_SUBSET not in fields:
        return None
    value = fields[DESTINATION_ENDPOINT_SUBSET]
    if value.WhichOneof("kind") != "list_value":
        return None
    return subset_ips(v.string_value for v in value.list_value.values if v.WhichOneof("kind") == "string_value")
