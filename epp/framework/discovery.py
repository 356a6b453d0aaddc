"""Endpoint discovery without Kubernetes: the contract of a ``dataLayer.discovery`` plugin.

Upstream's ``EndpointDiscovery`` (llm-d router ``framework/interface/datalayer/discovery.go``):
when a configuration names a discovery plugin, the picker runs with no API server at all and the
plugin alone says which endpoints exist. Here a plugin loads the full set once (``load``, which
raises :class:`DiscoveryError` when its source cannot be read at all, failing the picker's start)
and then, if it watches, hands every later full set to a :class:`DiscoveryNotifier` until it is
cancelled (a source that becomes unreadable keeps the last set and is logged). The picker turns
each :class:`DiscoveredEndpoint` into one routable endpoint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from epp.framework.plugin import TypedName

__all__ = ["DiscoveredEndpoint", "DiscoveryError", "DiscoveryNotifier", "EndpointDiscovery"]


class DiscoveryError(Exception):
    """The discovery source cannot be read at all (not one bad entry: those are skipped and logged)."""


@dataclass(frozen=True, slots=True)
class DiscoveredEndpoint:
    """One endpoint a discovery plugin reports; ``namespace/name`` is its identity."""

    name: str
    namespace: str
    address: str
    port: int
    labels: Mapping[str, str] = field(default_factory=dict)


class DiscoveryNotifier(Protocol):
    def replace(self, endpoints: Sequence[DiscoveredEndpoint]) -> None:
        """The endpoints now: every other one is gone."""
        ...


@runtime_checkable
class EndpointDiscovery(Protocol):
    @property
    def typed_name(self) -> TypedName: ...

    async def load(self) -> Sequence[DiscoveredEndpoint]:
        """The endpoints now; :class:`DiscoveryError` when the source cannot be read."""
        ...

    async def watch(self, notifier: DiscoveryNotifier) -> None:
        """Report every change of the source until cancelled (returns at once when the plugin does not watch)."""
        ...
