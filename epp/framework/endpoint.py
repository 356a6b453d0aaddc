"""What the scheduler knows about a serving endpoint: identity, its latest metrics and its health.

An :class:`Endpoint` is one (pod, target port) pair (upstream's "rank"); it is immutable and
replaced when the pod changes. :class:`EndpointState` pairs it with the most recent
:class:`MetricsSnapshot`, which the scraper swaps in as one reference assignment, so a scheduling
cycle (synchronous, on the event loop) always reads a consistent snapshot. Its
:class:`~epp.framework.health.EndpointHealth` is fed by the scraper and the response path.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from epp.framework.health import EndpointHealth, HealthPolicy

__all__ = ["ENGINE_TYPE_LABEL", "Endpoint", "EndpointState", "MetricsSnapshot", "join_host_port"]

ENGINE_TYPE_LABEL = "inference.networking.k8s.io/engine-type"
_NO_CUSTOM: Mapping[str, float] = MappingProxyType({})


def join_host_port(host: str, port: int) -> str:
    """``ip:port``, with IPv6 addresses bracketed (Go's ``net.JoinHostPort``)."""
    if ":" in host and not host.startswith("["):
        return f"[{host}]:{port}"
    return f"{host}:{port}"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """One routable (pod, port); ``name`` is ``<pod>-rank-<idx>`` as upstream."""

    namespace: str
    name: str
    pod_name: str
    address: str
    port: int
    rank: int = 0
    metrics_port: int = 0
    labels: Mapping[str, str] = field(default_factory=dict, compare=False)
    hostport: str = field(default="", compare=False)
    key: str = field(init=False, compare=False, repr=False)
    """Stable identity across metric updates: ``namespace/name`` (made once: every plugin asks for it)."""

    def __post_init__(self) -> None:
        if not self.hostport:
            object.__setattr__(self, "hostport", join_host_port(self.address, self.port))
        if not self.metrics_port:
            object.__setattr__(self, "metrics_port", self.port)
        object.__setattr__(self, "key", f"{self.namespace}/{self.name}")

    @property
    def engine(self) -> str:
        """Model-server engine from the pod label; ``vllm`` when unset."""
        return self.labels.get(ENGINE_TYPE_LABEL) or "vllm"


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """Model-server state read from one scrape. ``updated_at`` is Clock.now(); 0 means never."""

    waiting_queue: int = 0
    running: int = 0
    kv_cache_usage: float = 0.0
    active_adapters: frozenset[str] = frozenset()
    waiting_adapters: frozenset[str] = frozenset()
    max_adapters: int = 0
    cache_block_size: int = 0
    cache_num_blocks: int = 0
    updated_at: float = 0.0
    scrape_interval: float = 0.0
    """Seconds from the previous successful scrape to this one (the interval achieved, failures
    included); 0 until the second."""
    custom: Mapping[str, float] = field(default_factory=lambda: _NO_CUSTOM)
    """Engine-specific scalars by attribute key (``customMetrics`` of ``core-metrics-extractor``'s
    ``engineConfigs``), for plugins that want them; no in-tree plugin reads them yet."""

    def age(self, now: float) -> float:
        """Seconds since the last successful scrape (infinite if never scraped)."""
        return now - self.updated_at if self.updated_at else float("inf")


class EndpointState:
    """An endpoint, its latest metrics (the scraper replaces ``metrics`` wholesale) and its health.

    ``in_flight_requests`` and ``in_flight_tokens`` are what the picker itself has sent here and
    not yet seen end (the request pipeline adds at routing, subtracts when the stream is over):
    load known before any scrape reports it. Two integer fields on the object every cycle
    already reads, so counting costs no lookup and no allocation.
    """

    __slots__ = ("endpoint", "health", "in_flight_requests", "in_flight_tokens", "metrics")

    def __init__(
        self, endpoint: Endpoint, metrics: MetricsSnapshot | None = None, health: HealthPolicy | None = None
    ) -> None:
        self.endpoint = endpoint
        self.metrics = metrics if metrics is not None else MetricsSnapshot()
        self.in_flight_requests = 0
        self.in_flight_tokens = 0
        self.health = EndpointHealth(endpoint.key, health)

    def __repr__(self) -> str:
        m = self.metrics
        return (
            f"EndpointState({self.endpoint.key} {self.endpoint.hostport} q={m.waiting_queue} "
            f"kv={m.kv_cache_usage:.2f} lora={sorted(m.active_adapters)})"
        )
