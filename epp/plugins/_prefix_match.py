"""Prefix-match info's declarations: what its readers read and what its producers publish.

Reading (``no-hit-lru-scorer``, ``prefix-cache-affinity-filter``): the declared key and its read.

Upstream's plugins read the ``PrefixCacheMatchInfoDataKey`` of the producer ``prefixMatchInfoProducerName``
names, else of ``approx-prefix-cache-producer``, and declare it as a required input, so the loader
adds that producer (``config.data_graph``) when the configuration declares none, and refuses a
name that produces nothing. A plugin holding a :class:`PrefixMatchReader` declares
:meth:`PrefixMatchReader.dependencies` and hands the reader the data scope the loader binds. A
helper, not a plugin.

Publishing (``approx-``, ``burst-`` and ``precise-prefix-cache-producer``): each produces
``PrefixCacheMatchInfoDataKey/<its name>`` from the tokenized prompt it requires; the
:class:`PrefixMatchPublisher` mixin declares both and keeps the scope it is bound.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from epp.framework.data import NO_DATA, DataKey, DataScope, Dependencies
from epp.framework.data_keys import PREFIX_CACHE_MATCH_INFO, TOKENIZED_PROMPT, PrefixCacheMatches, TokenizedPrompt
from epp.framework.endpoint import EndpointState
from epp.framework.params import Params
from epp.framework.producers import PrefixMatchInfo
from epp.framework.request import InferenceRequest

__all__ = ["PrefixMatchPublisher", "PrefixMatchReader"]


class PrefixMatchReader:
    """One plugin's source of prefix-match info: the key it reads, through the scope it was bound."""

    __slots__ = ("key", "scope")

    def __init__(self, p: Params) -> None:
        self.key = PREFIX_CACHE_MATCH_INFO.named(p.text("prefixMatchInfoProducerName") or "")
        self.scope: DataScope = NO_DATA

    def dependencies(self, *, optional: bool = False) -> Dependencies:
        """The key read, required (a producer is added or must exist) or ``optional`` (none: no info, score 0)."""
        keys = {self.key: PrefixCacheMatches}
        return Dependencies(optional=keys) if optional else Dependencies(required=keys)

    def match(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> PrefixMatchInfo | None:
        """One count per candidate, or None when the producer published nothing for the request."""
        found = self.scope.get(request, self.key)
        return found.aligned(candidates) if isinstance(found, PrefixCacheMatches) else None


class PrefixMatchPublisher:
    """A producer of prefix-match info: it reads the tokenized prompt and publishes ``key`` through ``_data``.

    The class sets ``key`` (``PREFIX_CACHE_MATCH_INFO.named(its name)``) and ``_data`` (``NO_DATA``
    until the loader binds its scope) in its constructor.
    """

    key: DataKey
    _data: DataScope

    def produces(self) -> Mapping[DataKey, type]:
        return {self.key: PrefixCacheMatches}

    def consumes(self) -> Dependencies:
        return Dependencies(required={TOKENIZED_PROMPT: TokenizedPrompt})

    def bind_data_scope(self, scope: DataScope) -> None:
        self._data = scope
