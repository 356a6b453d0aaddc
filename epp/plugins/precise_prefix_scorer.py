"""precise-prefix-cache-scorer: llm-d's deprecated all-in-one form of precise prefix-cache routing.

Older llm-d configurations name one plugin where today's name a chain (``precise-prefix-cache-producer``
→ ``prefix-cache-scorer`` with ``prefixMatchInfoProducerName``). As in the llm-d router, this type
is a thin composition of those two: its parameters (``tokenProcessorConfig``, ``indexerConfig``,
``kvEventsConfig``, ``speculativeIndexing``, ``speculativeTTL``) build a producer exactly as they
would build a ``precise-prefix-cache-producer`` (errors name this type's fields), and an internal
``prefix-cache-scorer`` with its defaults reads that producer's match info; both carry this
plugin's name, so the match info is ``PrefixCacheMatchInfoDataKey/<its name>``, which it produces
and reads (through one data scope, shared by the two parts) and other scorers may read too.
Every hook delegates, so it routes, learns and subscribes as the chain does. The prompt's token
ids come from a ``token-producer`` (the loader adds the ``estimate`` one when none is declared,
which matches nothing precisely); llm-d's in-process ``indexerConfig.tokenizersPoolConfig`` is
refused, as for the producer. The loader reports the type as deprecated, naming the chain
(``compat.normalized``).

Not carried over: upstream's mode that binds this type to an already configured
``precise-prefix-cache-producer`` and ignores its own parameters; here it always builds its own.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from epp.framework.data import DataKey, DataScope, Dependencies
from epp.framework.endpoint import EndpointState
from epp.framework.measures import Measurements
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind
from epp.framework.producers import PrefixMatchInfo
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer, from_parameters, one_binder
from epp.plugins.prefix_cache_scorer import PrefixCacheScorer

__all__ = ["PrecisePrefixCacheScorer", "create"]

TYPE = "precise-prefix-cache-scorer"


class PrecisePrefixCacheScorer(NamedPlugin):
    """Scorer, data producer, PreRequest and endpoint observer, each by delegation to its two parts."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.SCORER, PluginKind.DATA_PRODUCER, PluginKind.PRE_REQUEST})

    def __init__(self, name: str, producer: PrecisePrefixCacheProducer) -> None:
        super().__init__(name)
        self.producer = producer
        self.scorer = PrefixCacheScorer(name, match_info_producer=name)

    def measure(self, into: Measurements) -> None:
        """What the producer part measures: its subscribers and its precise index (the scorer part holds none)."""
        self.producer.measure(into)

    def produces(self) -> Mapping[DataKey, type]:
        return self.producer.produces()

    def consumes(self) -> Dependencies:
        return Dependencies(required={**self.producer.consumes().required, **self.scorer.consumes().required})

    def bind_data_scope(self, scope: DataScope) -> None:
        self.producer.bind_data_scope(scope)
        self.scorer.bind_data_scope(scope)

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        await self.producer.produce(request, candidates)

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        return self.scorer.score(cycle, request, candidates)

    def prefix_match(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> PrefixMatchInfo | None:
        """As upstream, the match info is also published under this plugin's name for other scorers."""
        return self.producer.prefix_match(cycle, request, candidates)

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        self.producer.pre_request(cycle, request, result)

    def endpoints_added(self, states: Sequence[EndpointState]) -> None:
        self.producer.endpoints_added(states)

    def endpoints_removed(self, keys: Collection[str]) -> None:
        self.producer.endpoints_removed(keys)

    async def aclose(self) -> None:
        await self.producer.aclose()


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> PrecisePrefixCacheScorer:
    """Factory; the parameters are the producer's, read under this type's name."""
    return PrecisePrefixCacheScorer(name, one_binder(from_parameters(name, params, TYPE, context), TYPE, context))
