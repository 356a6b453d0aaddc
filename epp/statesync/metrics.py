"""The state sync's series: whether each pool's link is up, what went through it, what was lost, who is heard.

Declared here, beside the code they describe, on the picker's registry. Counts are kept as plain
integers by :class:`~epp.statesync.pool_sync.SyncCounts` and the link, and copied in before each
scrape (:meth:`SyncMetrics.refresh`).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from epp.statesync.pool_sync import SyncCounts
from epp.telemetry.series import Counter, Gauge

__all__ = ["SyncMetrics"]


class SyncMetrics:
    """``epp_state_sync_*`` on ``registry``."""

    __slots__ = ("connected", "disconnects", "dropped", "peers", "records")

    def __init__(self, registry: CollectorRegistry) -> None:
        self.connected = Gauge(
            "epp_state_sync_connected",
            "1 while the pool's state sync reaches its Valkey/Redis server; 0 while it routes on its own view alone.",
            ("pool",),
            registry=registry,
        )
        self.peers = Gauge(
            "epp_state_sync_peers",
            "Other pickers of the pool whose in-flight counts are being added to this one's.",
            ("pool",),
            registry=registry,
        )
        self.records = Counter(
            "epp_state_sync_records",
            "State-sync records sent to and received from the pool's other pickers.",
            ("pool", "direction"),
            registry=registry,
        )
        self.dropped = Counter(
            "epp_state_sync_dropped_records",
            "State-sync records lost: outbox full while the server was unreachable, for a plugin this "
            "configuration lacks, or unreadable.",
            ("pool", "reason"),
            registry=registry,
        )
        self.disconnects = Counter(
            "epp_state_sync_disconnects",
            "Times the pool's state sync lost its Valkey/Redis server.",
            ("pool",),
            registry=registry,
        )

    def refresh(self, pool: str, counts: SyncCounts, *, connected: bool, peers: int, disconnects: int) -> None:
        """Copy a pool's counts in (before a scrape)."""
        self.connected.labels(pool).set(1 if connected else 0)
        self.peers.labels(pool).set(peers)
        self.records.labels(pool, "sent").mirror(counts.sent)
        self.records.labels(pool, "received").mirror(counts.received)
        self.dropped.labels(pool, "outbox_full").mirror(counts.dropped_full)
        self.dropped.labels(pool, "unknown_plugin").mirror(counts.dropped_unknown)
        self.dropped.labels(pool, "undecodable").mirror(counts.undecodable)
        self.disconnects.labels(pool).mirror(disconnects)
