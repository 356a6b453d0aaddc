"""Extension points around scheduling that llm-d adds: data producers, prefix-match info, lifecycles.

- :class:`DataProducer` (upstream's ``PrepareRequestData``): awaited before the (synchronous)
  scheduling cycle with the request's candidates, e.g. ``token-producer`` tokenizing the prompt,
  ``approx-prefix-cache-producer`` matching it against each candidate; a producer must not raise
  for a request it cannot help (the request is scheduled without its data).
- :class:`PrefixMatchInfo`: per candidate, the leading prompt blocks it holds (what the prefix-match
  producers publish, ``epp.framework.data_keys.PrefixCacheMatches``).
- :class:`PluginReferrer`: plugins whose parameters name other plugins resolve them after every
  plugin of the config exists.
- :class:`EndpointsAddedObserver` and :class:`AsyncClosable`: plugins that hold per-endpoint
  resources (subscribers) start them when endpoints arrive and release everything when their
  configuration is replaced or the picker stops.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from epp.framework.endpoint import EndpointState
from epp.framework.plugin import Plugin, TypedName
from epp.framework.request import InferenceRequest

__all__ = [
    "AsyncClosable",
    "DataProducer",
    "EndpointsAddedObserver",
    "PluginReferrer",
    "PrefixMatchInfo",
]


@runtime_checkable
class DataProducer(Protocol):
    """Prepares data for a request before its (synchronous) scheduling cycle; may await I/O."""

    @property
    def typed_name(self) -> TypedName: ...

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        """Add data to ``request`` (about it, or about each of ``candidates``) before scheduling; on
        failure leave it without and log."""
        ...


@dataclass(frozen=True, slots=True)
class PrefixMatchInfo:
    """Per candidate (in order): leading prompt blocks the endpoint holds; and the prompt's block count."""

    match_blocks: Sequence[int]
    total_blocks: int
    block_size_tokens: int


@runtime_checkable
class PluginReferrer(Protocol):
    """A plugin whose parameters name other plugins of the configuration."""

    def resolve_references(self, lookup: Callable[[str, str], Plugin]) -> None:
        """Resolve plugin names from parameters; ``lookup(parameter_path, name)`` raises when undefined."""
        ...


@runtime_checkable
class EndpointsAddedObserver(Protocol):
    def endpoints_added(self, states: Sequence[EndpointState]) -> None: ...


@runtime_checkable
class AsyncClosable(Protocol):
    """A plugin holding background resources, closed when its configuration is replaced or the picker stops."""

    async def aclose(self) -> None:
        """Release background resources (tasks, sockets, clients); safe to call twice."""
        ...
