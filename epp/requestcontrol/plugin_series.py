"""The series plugins publish through :class:`~epp.framework.measures.Measurements`: prefix indexes, KV events.

Plugins import only the framework, so the series of what they measure are declared here, under
upstream's names: GIE's prefix-indexer size (one sum over every prefix index) and the llm-d
router's (one series per plugin name and type), the prefix-indexer hit ratio and hit bytes, and
for the precise producer's KV-event subscribers the llm-d router's names where it has the series
(``pkg/kvcache/metrics``: active subscribers, messages, reconnections; absent under
``--metrics-naming=gie``) and ours for what only this picker counts (gaps, replays, restarts,
decode errors, disconnects, skipped stores, central messages no endpoint claims, index blocks),
and ``token-producer``'s token cache (ours, per plugin: hits, misses, evictions, ids held, ids
served from cached prefixes, seam failures, whether prefix reuse is on).

:meth:`PluginSeries.publish` runs just before each ``/metrics`` scrape with what the plugins of
every pool's configuration in force reported into one fresh :class:`Readings`
(``PoolRouting.measure``, which the epp.v1 Endpoints API reads its prefix index sizes from too),
values under the same labels summed (one plugin name in several pools, several sources of one
endpoint), and the series are set from them. Counts live on their sources (plain increments on
their tasks) and are mirrored: a source made anew (a configuration reload, an endpoint back)
starts from 0, which Prometheus reads as a counter reset. Labels nothing reported any more (a
plugin or an endpoint gone) lose their series, as llm-d's do.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from epp.framework.measures import KvEventCounts, Measured, TokenCacheCounts
from epp.framework.plugin import TypedName
from epp.telemetry.families import Names
from epp.telemetry.metrics import EppMetrics
from epp.telemetry.series import Counter, Gauge

__all__ = ["PluginSeries", "Readings"]

_PLUGIN = ("plugin_name", "plugin_type")
_POD = ("pod_identifier",)


def _lookup(gie: str, llm_d: str, documentation: str) -> Names:
    """A prefix-index lookup histogram: per plugin under the llm-d router's name, over all under GIE's."""
    return Names(gie, llm_d, documentation, labels=_PLUGIN, gie_labels=())


def _llm_d_kv(name: str, documentation: str) -> Names:
    """One of the llm-d router's KV-event counters (plain Prometheus HELP, per endpoint)."""
    return Names(None, name, documentation, labels=_POD, alpha=False)


class Readings:
    """What the plugins reported for one scrape (the :class:`~epp.framework.measures.Measurements` they get)."""

    @classmethod
    def of(cls, plugins: Iterable[object]) -> Readings:
        """What every measured plugin among ``plugins`` reports."""
        readings = cls()
        for plugin in plugins:
            if isinstance(plugin, Measured):
                plugin.measure(readings)
        return readings

    def __init__(self) -> None:
        self.index_sizes: dict[tuple[str, str], int] = {}
        """Entries by (plugin name, plugin type)."""
        self.subscribers = 0
        self.sources: dict[str, KvEventCounts] = {}
        self.blocks: dict[str, int] = {}
        self.stores_skipped = 0
        self.unattributed = 0
        self.token_caches: dict[tuple[str, str], TokenCacheCounts] = {}
        """By (plugin name, plugin type); the last report of a name in several pools wins."""
        self.backends: dict[str, tuple[bool, int, int, int]] = {}
        """By plugin name: a shared index's (connected, lookup failures, dropped writes, disconnects)."""

    def prefix_index_size(self, plugin: TypedName, entries: int) -> None:
        key = (plugin.name, plugin.type)
        self.index_sizes[key] = self.index_sizes.get(key, 0) + entries

    def kv_event_subscribers(self, active: int) -> None:
        self.subscribers += active

    def kv_event_source(self, endpoint: str, counts: KvEventCounts) -> None:
        self.sources.setdefault(endpoint, KvEventCounts()).add(counts)

    def kv_events_unattributed(self, count: int) -> None:
        self.unattributed += count

    def kv_index(self, blocks: Mapping[str, int], stores_skipped: int) -> None:
        for endpoint, n in blocks.items():
            self.blocks[endpoint] = self.blocks.get(endpoint, 0) + n
        self.stores_skipped += stores_skipped

    def token_cache(self, plugin: TypedName, counts: TokenCacheCounts) -> None:
        self.token_caches[(plugin.name, plugin.type)] = counts

    def kv_index_backend(
        self, plugin: TypedName, *, connected: bool, lookup_failures: int, dropped_writes: int, disconnects: int
    ) -> None:
        was = self.backends.get(plugin.name, (True, 0, 0, 0))  # one name in several pools: up only if all are
        self.backends[plugin.name] = (
            was[0] and connected,
            was[1] + lookup_failures,
            was[2] + dropped_writes,
            was[3] + disconnects,
        )


class PluginSeries:
    """The series of what plugins measure; :meth:`publish` sets them from the plugins in force."""

    def __init__(self, metrics: EppMetrics) -> None:
        f, r = metrics.families, metrics.registry
        self.index_size = f.gauge(  # GIE: the sum over the prefix indexes; llm-d: one series each
            Names(
                "inference_extension_prefix_indexer_size",
                None,
                "Size of the prefix indexer.",
                successor="llm_d_epp_prefix_indexer_size",
            )
        )
        self.index_size_by_plugin = f.gauge(  # values: plugin name, plugin type
            Names(None, "llm_d_epp_prefix_indexer_size", "Size of the prefix indexer.", labels=_PLUGIN)
        )
        self.hit_ratio = f.histogram(  # values: plugin name, plugin type
            _lookup(
                "inference_extension_prefix_indexer_hit_ratio",
                "llm_d_epp_prefix_indexer_hit_ratio",
                "Ratio of prefix length matched to total prefix length in the cache lookup.",
            ),
            (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0),
        )
        self.hit_bytes = f.histogram(  # values: plugin name, plugin type
            _lookup(
                "inference_extension_prefix_indexer_hit_bytes",
                "llm_d_epp_prefix_indexer_hit_bytes",
                "Length of the prefix match in number of bytes in the cache lookup.",
            ),
            (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536),
        )
        self.subscribers = f.gauge(
            Names(
                None,
                "llm_d_epp_kv_cache_events_active_subscribers",
                "Number of ZMQ subscribers currently managed, including those retrying a failed connection",
                alpha=False,
            )
        )
        self.messages = f.counter(
            _llm_d_kv(
                "llm_d_epp_kv_cache_events_messages_received_total",
                "Total number of messages received from ZMQ subscribers",
            )
        )
        self.reconnections = f.counter(
            _llm_d_kv(
                "llm_d_epp_kv_cache_events_subscriber_reconnections_total",
                "Total number of ZMQ subscriber reconnection attempts",
            )
        )
        self.gaps = Counter(
            "epp_kv_events_gaps_total",
            "KV-event sequence gaps (messages missed): the endpoint's entries are replayed or cleared.",
            _POD,
            registry=r,
        )
        self.replays = Counter(
            "epp_kv_events_replays_total", "Replays requested from the endpoint's replay socket.", _POD, registry=r
        )
        self.restarts = Counter(
            "epp_kv_events_publisher_restarts_total",
            "KV-event publisher restarts seen (sequence going backwards): the endpoint's entries are cleared.",
            _POD,
            registry=r,
        )
        self.decode_errors = Counter(
            "epp_kv_events_decode_errors_total",
            "KV-event messages that were not a vLLM EventBatch: the endpoint's entries are cleared.",
            _POD,
            registry=r,
        )
        self.disconnects = Counter(
            "epp_kv_events_disconnects_total",
            "Connections to the endpoint's KV-event publisher dropped: its entries are cleared.",
            _POD,
            registry=r,
        )
        self.stores_skipped = Counter(
            "epp_kv_events_stores_skipped_total",
            "BlockStored events not indexed (unknown parent block, block size not a multiple of the "
            "index's, a tier other than GPU, no model in the topic).",
            registry=r,
        )
        self.unattributed = Counter(
            "epp_kv_events_unattributed_total",
            "KV-event messages on the central socket (zmqEndpoint) whose topic kv@<ip>:<port>@<model> names "
            "no endpoint of the pool: dropped.",
            registry=r,
        )
        self.index_blocks = Gauge(
            "epp_kv_events_index_blocks",
            "Engine KV blocks the precise prefix index holds for each endpoint, from its KV events.",
            _POD,
            registry=r,
        )
        self.token_cache = _TokenCacheSeries(metrics)
        backend = ("plugin_name",)
        self.backend_connected = Gauge(
            "epp_kv_index_backend_connected",
            "1 while the precise prefix index's Valkey/Redis server answers; 0 while requests are routed "
            "without precise prefix-match info.",
            backend,
            registry=r,
        )
        self.backend_lookup_failures = Counter(
            "epp_kv_index_backend_lookup_failures_total",
            "Precise prefix-index lookups without an answer in time (server slow, failing or unreachable): "
            "the request had no prefix-match info.",
            backend,
            registry=r,
        )
        self.backend_dropped = Counter(
            "epp_kv_index_backend_dropped_writes_total",
            "Index write operations lost to a full queue while the server was slow or away (the endpoint's "
            "entries are cleared when it is back).",
            backend,
            registry=r,
        )
        self.backend_disconnects = Counter(
            "epp_kv_index_backend_disconnects_total",
            "Times the precise prefix index lost its Valkey/Redis server.",
            backend,
            registry=r,
        )
        self._plugins: set[tuple[str, str]] = set()
        self._endpoints: set[str] = set()
        self._backends: set[str] = set()

    def publish(self, readings: Readings) -> None:
        """Set the series from what the plugins in force reported (``PoolRouting.measure``, every pool's)."""
        self._publish_indexes(readings.index_sizes)
        self._publish_kv_events(readings)
        self.token_cache.publish(readings.token_caches)
        self._publish_backends(readings.backends)

    def _publish_backends(self, backends: Mapping[str, tuple[bool, int, int, int]]) -> None:
        families = (
            self.backend_connected,
            self.backend_lookup_failures,
            self.backend_dropped,
            self.backend_disconnects,
        )
        for gone in self._backends - backends.keys():
            for family in families:
                family.remove(gone)
        for name, (connected, failures, dropped, disconnects) in backends.items():
            self.backend_connected.labels(name).set(1 if connected else 0)
            self.backend_lookup_failures.labels(name).mirror(failures)
            self.backend_dropped.labels(name).mirror(dropped)
            self.backend_disconnects.labels(name).mirror(disconnects)
        self._backends = set(backends)

    def _publish_indexes(self, sizes: Mapping[tuple[str, str], int]) -> None:
        self.index_size.set(sum(sizes.values()))
        by_plugin = self.index_size_by_plugin
        for gone in self._plugins - sizes.keys():
            by_plugin.remove(*gone)
        for (name, type_name), size in sizes.items():
            by_plugin.labels(name, type_name).set(size)
        self._plugins = set(sizes)

    def _publish_kv_events(self, readings: Readings) -> None:
        self.subscribers.set(readings.subscribers)
        self.stores_skipped.mirror(readings.stores_skipped)
        self.unattributed.mirror(readings.unattributed)
        endpoints = set(readings.sources) | set(readings.blocks)
        for gone in self._endpoints - endpoints:
            for family in (self.messages, self.reconnections):
                family.remove(gone)
            for series in (self.gaps, self.replays, self.restarts, self.decode_errors, self.disconnects):
                series.remove(gone)
            self.index_blocks.remove(gone)
        for endpoint, counts in readings.sources.items():
            self.messages.labels(endpoint).mirror(counts.messages)
            self.reconnections.labels(endpoint).mirror(counts.reconnections)
            self.gaps.labels(endpoint).mirror(counts.gaps)
            self.replays.labels(endpoint).mirror(counts.replays)
            self.restarts.labels(endpoint).mirror(counts.restarts)
            self.decode_errors.labels(endpoint).mirror(counts.decode_errors)
            self.disconnects.labels(endpoint).mirror(counts.disconnects)
        for endpoint in endpoints:
            self.index_blocks.labels(endpoint).set(readings.blocks.get(endpoint, 0))
        self._endpoints = endpoints


class _TokenCacheSeries:
    """``token-producer``'s token-cache series, per plugin name and type (ours)."""

    def __init__(self, metrics: EppMetrics) -> None:
        r = metrics.registry

        def counter(name: str, documentation: str) -> Counter:
            return Counter(name, documentation, _PLUGIN, registry=r)

        self.hits = counter("epp_token_cache_hits_total", "Prompts whose token ids the cache served whole.")
        self.misses = counter(
            "epp_token_cache_misses_total", "Prompts tokenized (all of them, or what followed a cached prefix)."
        )
        self.evictions = counter("epp_token_cache_evictions_total", "Cache entries evicted to stay within the bound.")
        self.prefix_tokens = counter(
            "epp_token_cache_prefix_tokens_total",
            "Token ids served from cached prefixes to prompts then tokenized past them (the local tokenizer).",
        )
        self.seam_failures = counter(
            "epp_token_cache_seam_failures_total",
            "Joins of cached and fresh ids that failed their check: prefix reuse is off from the first.",
        )
        self.tokens = Gauge(
            "epp_token_cache_tokens", "Token ids the cache holds (bounded by cacheMaxTokens).", _PLUGIN, registry=r
        )
        self.prefix_reuse = Gauge(
            "epp_token_cache_prefix_reuse",
            "1 while prompts sharing a beginning reuse its ids; 0: whole prompts only.",
            _PLUGIN,
            registry=r,
        )
        self._plugins: set[tuple[str, str]] = set()

    def publish(self, caches: Mapping[tuple[str, str], TokenCacheCounts]) -> None:
        counters = (self.hits, self.misses, self.evictions, self.prefix_tokens, self.seam_failures)
        for gone in self._plugins - caches.keys():
            for series in (*counters, self.tokens, self.prefix_reuse):
                series.remove(*gone)
        for plugin, c in caches.items():
            for series, value in zip(
                counters, (c.hits, c.misses, c.evictions, c.prefix_tokens, c.seam_failures), strict=True
            ):
                series.labels(*plugin).mirror(value)
            self.tokens.labels(*plugin).set(c.tokens)
            self.prefix_reuse.labels(*plugin).set(1 if c.prefix_reuse else 0)
        self._plugins = set(caches)
