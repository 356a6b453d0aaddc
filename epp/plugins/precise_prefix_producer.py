"""precise-prefix-cache-producer: prefix-match info from what the pods announce in their KV events.

llm-d's producer (``pkg/kvevents``, ``preciseprefixcache``): one ZMQ subscriber per endpoint whose
labels match ``kvEventsConfig.podDiscoveryConfig.podLabelSelector``, dialled at
``tcp://<address>:<socketPort + rank>`` (and ``replaySocketPort`` when set), feeding a bounded
:class:`~epp.kvevents.index.KvBlockIndex`; an endpoint that leaves is unsubscribed and its
entries freed. Before scheduling (``produce``) it hashes ``request.token_ids`` (``TokenizedPrompt``,
from ``token-producer``) into block keys seeded with the target model and publishes, per
candidate, the leading blocks it holds (llm-d's ``LongestPrefix`` with one tier, GPU, weight 1.0)
as ``PrefixCacheMatchInfoDataKey/<its name>``, which ``prefix-cache-scorer`` reads when its
``prefixMatchInfoProducerName`` names this plugin. A request without engine tokens (none, or the
``estimate`` backend's pseudo-tokens), or with a ``cache_salt`` (the events' ``extra_keys`` are
not indexed), has no match info: it scores 0 everywhere, as upstream.

With ``speculativeIndexing`` (llm-d's, off by default) PreRequest records the request's keys on
the chosen endpoint for ``speculativeTTL`` (2 s), so requests sharing a prefix follow the first
one before its BlockStored events arrive (without it, a burst on a new prefix scatters by load).

Each subscriber, and the central socket's receiver, runs as a task of the producer's
:class:`~epp.tasks.TaskSet`: a subscriber's is cancelled when its endpoint leaves, all are stopped
by ``aclose``. Before each ``/metrics`` scrape the producer reports (``measure``) its index's size
and blocks per endpoint, its subscriber sockets, each source's counts and the central socket's
dropped messages.

With ``kvBlockIndexConfig.valkeyConfig`` or ``redisConfig`` the index lives on that server, shared
by the pool's replicas (:mod:`epp.kvevents.redis_index`, :mod:`epp.plugins._shared_kv_index`):
``produce`` asks it once per request, bounded in time; ``prefix_match`` (the deprecated
all-in-one scorer) reads only what ``produce`` published.

Settings this picker does not have are refused by name: the cost-aware index, CPU tiers
(``kvCacheBackendConfigs``), ``podCacheSize`` and llm-d's own hash layouts (``cbor-fnv``); so is
``discoverPods: false`` without a ``zmqEndpoint`` (no events would ever arrive).
"""

from __future__ import annotations

import logging
import re
import time
from asyncio import Task
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import zmq.asyncio

from epp.framework.data import NO_DATA, DataScope
from epp.framework.data_keys import (
    PREFIX_CACHE_MATCH_INFO,
    EstimatedTokens,
    PrefixCacheMatches,
)
from epp.framework.endpoint import EndpointState
from epp.framework.measures import Measurements
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind
from epp.framework.producers import PrefixMatchInfo
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.kvevents.central import CentralReceiver
from epp.kvevents.index import KvBlockIndex, block_keys, chain_seed
from epp.kvevents.ingest import SourceCounts
from epp.kvevents.redis_layout import RedisIndexSettings
from epp.kvevents.subscriber import Subscriber
from epp.labels import Selector, SelectorError, parse_selector
from epp.plugins._prefix_match import PrefixMatchPublisher
from epp.plugins._shared_kv_index import report_health, shared_index
from epp.tasks import TaskSet

if TYPE_CHECKING:
    from epp.kvevents.redis_index import RedisBlockIndex

__all__ = ["PrecisePrefixCacheProducer", "create", "from_parameters"]

TYPE = "precise-prefix-cache-producer"
log = logging.getLogger(__name__)

DEFAULT_POD_SELECTOR = "llm-d.ai/inference-serving=true"
_ZMQ_ENDPOINT = re.compile(r"(tcp://(\*|\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):\d{1,5}|ipc://.+)")


@dataclass(frozen=True, slots=True)
class _Matches(PrefixCacheMatches):
    """What this producer publishes, with the request's block keys (for speculative indexing)."""

    keys: Sequence[int] = ()


class PrecisePrefixCacheProducer(PrefixMatchPublisher, NamedPlugin):
    """Owns the index and the subscribers; answers ``prefix_match`` for ``prefix-cache-scorer``."""

    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_PRODUCER, PluginKind.PRE_REQUEST})

    def __init__(
        self,
        name: str,
        *,
        block_size_tokens: int = 16,
        hash_seed: str = "",
        max_entries: int = 100_000_000,
        topic_filter: str = "kv@",
        pod_selector: Selector | None = None,
        socket_port: int = 5557,
        replay_port: int = 0,
        max_prefix_blocks: int = 4096,
        speculative_ttl: float | None = None,
        zmq_endpoint: str = "",
        discover_pods: bool = True,
        shared_index: RedisIndexSettings | None = None,
        pool: str = "",
    ) -> None:
        super().__init__(name)
        self.block_size_tokens = block_size_tokens
        self.hash_seed = hash_seed
        self.index: KvBlockIndex | RedisBlockIndex
        if shared_index is None:
            self.index = KvBlockIndex(block_size_tokens, max_entries=max_entries)
        else:  # imported only when configured: redis-py imports the OpenTelemetry SDK at import time
            from epp.kvevents.redis_index import RedisBlockIndex

            self.index = RedisBlockIndex(shared_index, block_size_tokens, pool=pool, producer=name)
        self.topic_filter = topic_filter
        self.pod_selector = pod_selector if pod_selector is not None else parse_selector(DEFAULT_POD_SELECTOR)
        self.socket_port = socket_port
        self.replay_port = replay_port
        self.max_prefix_blocks = max_prefix_blocks
        self.speculative_ttl = speculative_ttl
        """Seconds a routed request's keys count as held by its endpoint; None: no speculative indexing."""
        self.zmq_endpoint = zmq_endpoint
        """Central mode: the address this picker binds for every engine to connect to; "" for none."""
        self.discover_pods = discover_pods
        self.subscribers: dict[str, Subscriber] = {}
        self.central: CentralReceiver | None = None
        self._running = TaskSet()
        self._tasks: dict[str, Task[None]] = {}
        self._context: zmq.asyncio.Context | None = None
        self._cycle_key = f"{TYPE}/{name}/keys"
        self._closed = False
        self.key = PREFIX_CACHE_MATCH_INFO.named(name)
        self._data: DataScope = NO_DATA

    @property
    def shared_index(self) -> RedisBlockIndex | None:
        """The index on a Valkey/Redis server, or None (the in-memory one)."""
        index = self.index
        return None if isinstance(index, KvBlockIndex) else index

    # -- endpoint lifecycle (runtime hooks) ---------------------------------------------------------

    def endpoints_added(self, states: Sequence[EndpointState]) -> None:
        if self._closed:
            return
        if (shared := self.shared_index) is not None:
            shared.start()
        if self.zmq_endpoint:
            central = self._central_receiver()
            for state in states:
                central.attribute(state.endpoint.hostport, state.endpoint.key)
        if not self.discover_pods:
            return
        for state in states:
            endpoint = state.endpoint
            key = endpoint.key
            if key in self._tasks or not self.pod_selector.matches(endpoint.labels):
                continue
            host = f"[{endpoint.address}]" if ":" in endpoint.address else endpoint.address
            replay = f"tcp://{host}:{self.replay_port + endpoint.rank}" if self.replay_port > 0 else None
            subscriber = Subscriber(
                self._zmq_context(),
                self.index,
                pod=key,
                endpoint=f"tcp://{host}:{self.socket_port + endpoint.rank}",
                replay_endpoint=replay,
                topic_filter=self.topic_filter,
            )
            self.subscribers[key] = subscriber
            self._tasks[key] = self._running.start(subscriber.run(), f"kv-events {key}", forever=True)

    def _zmq_context(self) -> zmq.asyncio.Context:
        if self._context is None:
            self._context = zmq.asyncio.Context()
        return self._context

    def _central_receiver(self) -> CentralReceiver:
        """The central socket, bound (on its own task) the first time the pool's endpoints are known."""
        if self.central is None:
            self.central = CentralReceiver(
                self._zmq_context(), self.index, endpoint=self.zmq_endpoint, topic_filter=self.topic_filter
            )
            self._running.start(self.central.run(), f"kv-events central {self.typed_name.name}", forever=True)
        return self.central

    def endpoints_removed(self, keys: Collection[str]) -> None:
        for key in keys:
            task = self._tasks.pop(key, None)
            if task is not None:
                task.cancel()
            self.subscribers.pop(key, None)
            if self.central is not None:
                self.central.forget(key)
            self.index.clear(key)

    def event_sources(self) -> list[SourceCounts]:
        """Per-endpoint counts of every source: the dialled subscribers, and each engine heard centrally."""
        sources: list[SourceCounts] = list(self.subscribers.values())
        if self.central is not None:
            sources.extend(self.central.streams.values())
        return sources

    @property
    def active_subscribers(self) -> int:
        """ZMQ subscriber sockets managed: one per dialled endpoint, plus the central one (as llm-d counts)."""
        return len(self.subscribers) + (self.central is not None)

    async def aclose(self) -> None:
        """Stop every source; the in-memory index is freed, a shared one kept (the pods did not leave)."""
        self._closed = True
        shared = self.shared_index
        if shared is not None:
            for task in self._tasks.values():
                task.cancel()
            self._tasks.clear()
            self.subscribers.clear()
        else:
            self.endpoints_removed(list(self._tasks))
        await self._running.stop()
        if shared is not None:
            await shared.stop()
        context, self._context = self._context, None
        if context is not None:
            context.destroy(linger=0)

    # -- per request ---------------------------------------------------------------------------------

    def _keys(self, request: InferenceRequest) -> list[int] | None:
        """The request's block keys, or None without engine tokens or with a salt."""
        tokens = request.token_ids
        if tokens is None or isinstance(tokens, EstimatedTokens) or request.cache_salt:
            return None
        seed = chain_seed(self.hash_seed + (request.target_model or request.model))
        return block_keys(tokens, self.block_size_tokens, seed, self.max_prefix_blocks)

    def request_keys(self, cycle: CycleState, request: InferenceRequest) -> Sequence[int] | None:
        """The request's block keys (computed once: by ``produce``, else once per cycle)."""
        found = self._data.get(request, self.key)
        if isinstance(found, _Matches):
            return found.keys
        if self._cycle_key in cycle:
            keys: Sequence[int] | None = cycle[self._cycle_key]
            return keys
        keys = cycle[self._cycle_key] = self._keys(request)
        return keys

    async def produce(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> None:
        keys = self._keys(request)
        if keys is None:
            return
        index = self.index
        if not isinstance(index, KvBlockIndex):
            index.start()
            pods = [c.endpoint.key for c in candidates]
            counts = await index.longest_prefixes(keys, pods)
            if counts is None:  # no answer in time: no match info, as a request without tokens
                return
            matches = dict(zip(pods, counts, strict=True))
        else:
            now = time.monotonic() if self.speculative_ttl is not None else 0.0
            matches = {c.endpoint.key: index.longest_prefix(c.endpoint.key, keys, now) for c in candidates}
        self._data.put(request, self.key, _Matches(matches, len(keys), self.block_size_tokens, keys))

    def prefix_match(
        self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]
    ) -> PrefixMatchInfo | None:
        """Per candidate: what ``produce`` published, else (in-memory only) computed now."""
        found = self._data.get(request, self.key)
        if isinstance(found, PrefixCacheMatches):
            return found.aligned(candidates)
        index = self.index
        if not isinstance(index, KvBlockIndex):  # a shared index answers only ``produce`` (the request's one lookup)
            return None
        keys = self.request_keys(cycle, request)
        if keys is None:
            return None
        now = time.monotonic() if self.speculative_ttl is not None else 0.0
        return PrefixMatchInfo(
            match_blocks=[index.longest_prefix(c.endpoint.key, keys, now) for c in candidates],
            total_blocks=len(keys),
            block_size_tokens=self.block_size_tokens,
        )

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        """Speculative indexing: the chosen endpoints hold the request's keys until the TTL passes."""
        ttl = self.speculative_ttl
        if ttl is None:
            return
        keys = self.request_keys(cycle, request)
        if not keys:
            return
        now = time.monotonic()
        index = self.index
        for profile_result in result.profile_results.values():
            if profile_result is not None and profile_result.targets:
                pod = profile_result.targets[0].endpoint.key
                if isinstance(index, KvBlockIndex):
                    index.speculate(pod, keys, now + ttl, now)
                else:
                    index.speculate(pod, keys, ttl)

    @property
    def index_size(self) -> int:
        return len(self.index)

    def measure(self, into: Measurements) -> None:
        into.prefix_index_size(self.typed_name, self.index_size)
        into.kv_event_subscribers(self.active_subscribers)
        for source in self.event_sources():
            into.kv_event_source(source.pod, source.counts)
        if self.central is not None:
            into.kv_events_unattributed(self.central.unattributed)
        index = self.index
        into.kv_index({pod: index.blocks(pod) for pod in index.endpoints()}, index.skipped)
        if not isinstance(index, KvBlockIndex):
            into.kv_index_backend(
                self.typed_name,
                connected=index.connected,
                lookup_failures=index.lookup_failures,
                dropped_writes=index.dropped,
                disconnects=index.disconnects,
            )


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> PrecisePrefixCacheProducer:
    """Factory; llm-d's parameter names and defaults."""
    return one_binder(from_parameters(name, params, TYPE, context), TYPE, context)


def one_binder(
    producer: PrecisePrefixCacheProducer, plugin_type: str, context: PluginContext
) -> PrecisePrefixCacheProducer:
    """``producer``, unless it binds a central socket in a pod that several processes serve (each would bind it)."""
    if producer.zmq_endpoint and context.serving_processes > 1:
        raise PluginConfigError(
            f"{plugin_type}.parameters.kvEventsConfig.zmqEndpoint: {producer.zmq_endpoint!r} is bound by one "
            f"process, and epp serve --workers {context.serving_processes} runs that many: let every process dial "
            "the pods (kvEventsConfig.podDiscoveryConfig, the default) or serve with one worker"
        )
    return producer


def from_parameters(
    name: str, params: Mapping[str, Any], plugin_type: str, context: PluginContext
) -> PrecisePrefixCacheProducer:
    """The producer for llm-d's parameters; errors name ``<plugin_type>.parameters.<field>``.

    ``plugin_type`` is the type the parameters were written for: this one, or the deprecated
    ``precise-prefix-cache-scorer`` that forwards its parameters here. An index on Valkey/Redis is
    namespaced by the context's pool and reports its server's state as the health detail
    ``kv-index/<namespace>/<pool>/<name>``.
    """

    def _refuse(where: str, what: str) -> PluginConfigError:
        return PluginConfigError(f"{plugin_type}.parameters.{where}: {what} is not supported by this picker")

    p = Params(plugin_type, params)
    block_size, seed = 16, ""
    tokens = p.nested("tokenProcessorConfig")
    if tokens is not None:
        block_size = tokens.integer("blockSizeTokens", 0, minimum=1) or tokens.integer("blockSize", 16, minimum=1)
        seed = tokens.text("hashSeed") or ""
        algorithm = tokens.text("hashAlgorithm") or "xxh64"
        if algorithm != "xxh64":
            raise _refuse("tokenProcessorConfig.hashAlgorithm", repr(algorithm) + " (keys here are XXH64)")
        tokens.done()
    max_entries = 100_000_000
    shared: RedisIndexSettings | None = None
    indexer = p.nested("indexerConfig")
    if indexer is not None:
        if indexer.present("kvCacheBackendConfigs"):
            raise _refuse("indexerConfig.kvCacheBackendConfigs", "a tier other than GPU")
        if indexer.present("tokenizersPoolConfig"):
            raise _refuse("indexerConfig.tokenizersPoolConfig", "tokenizing here (use a token-producer)")
        block_index = indexer.nested("kvBlockIndexConfig")
        if block_index is not None:
            if block_index.present("costAwareMemoryConfig"):
                raise _refuse("indexerConfig.kvBlockIndexConfig.costAwareMemoryConfig", "the cost-aware index")
            shared = shared_index(block_index, plugin_type)
            # Both checked here and reported as without effect at load (compat.py). Upstream logs the
            # index metrics every metricsLoggingInterval (a Go duration: nanoseconds) only with enableMetrics.
            block_index.boolean("enableMetrics", False)
            block_index.integer("metricsLoggingInterval", 0, minimum=0)
            memory = block_index.nested("inMemoryConfig")
            if memory is not None:
                max_entries = memory.integer("size", max_entries, minimum=1)
                if memory.integer("podCacheSize", 10, minimum=1) != 10:
                    raise _refuse("indexerConfig.kvBlockIndexConfig.inMemoryConfig.podCacheSize", "a pod cap per key")
                memory.done()
            block_index.done()
        indexer.done()
    topic, selector, port, replay = "kv@", parse_selector(DEFAULT_POD_SELECTOR), 5557, 0
    central, discover = "", True
    events = p.nested("kvEventsConfig")
    if events is not None:
        central = events.text("zmqEndpoint") or ""
        if central and not _ZMQ_ENDPOINT.fullmatch(central):
            raise PluginConfigError(
                f"{plugin_type}.parameters.kvEventsConfig.zmqEndpoint: {central!r} is not a ZMQ endpoint "
                "the picker can bind (tcp://<host or *>:<port>, or ipc://<path>)"
            )
        discover = events.boolean("discoverPods", True)
        if not discover and not central:
            raise PluginConfigError(
                f"{plugin_type}.parameters.kvEventsConfig.discoverPods: false needs a zmqEndpoint "
                "(central mode), else no KV events would ever arrive"
            )
        topic_filter = events.text("topicFilter")
        topic = topic if topic_filter is None else topic_filter
        events.choice("engineType", "vllm", ("vllm", "sglang"))  # one decoder reads both (SGLang's is positional)
        events.integer("concurrency", 4, minimum=1)  # checked here; reported as without effect at load (compat.py)
        discovery = events.nested("podDiscoveryConfig")
        if discovery is not None:
            text = discovery.text("podLabelSelector")
            if text is not None:
                try:
                    selector = parse_selector(text)
                except SelectorError as e:
                    raise PluginConfigError(f"{plugin_type}.parameters.kvEventsConfig.podDiscoveryConfig: {e}") from e
            if discovery.text("podNamespace"):
                raise _refuse("kvEventsConfig.podDiscoveryConfig.podNamespace", "a namespace other than the pool's")
            port = discovery.integer("socketPort", 5557, minimum=1)
            replay = discovery.integer("replaySocketPort", 0)
            discovery.done()
        events.done()
    speculative = p.boolean("speculativeIndexing", False)
    ttl = p.duration("speculativeTTL", 2.0)
    p.done()
    producer = PrecisePrefixCacheProducer(
        name,
        block_size_tokens=block_size,
        hash_seed=seed,
        max_entries=max_entries,
        topic_filter=topic,
        pod_selector=selector,
        socket_port=port,
        replay_port=max(replay, 0),
        speculative_ttl=ttl if speculative else None,
        zmq_endpoint=central,
        discover_pods=discover,
        shared_index=shared,
        pool=f"{context.pool_namespace}/{context.pool_name}",
    )
    report_health(producer.shared_index, context, name)
    return producer
