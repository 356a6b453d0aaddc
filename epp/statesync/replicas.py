"""A pool's state sync as ``epp serve`` runs it: its records, its Valkey link, its endpoints, its series.

Built per pool when ``--state-sync-address`` is set. It follows the pool's datastore (the peers'
in-flight counts go onto endpoints as they join), binds the replicated plugins of the
configuration in force (again after each reload, :meth:`ReplicaSync.bind`) and copies its counts
into the ``epp_state_sync_*`` series before each scrape. ``source`` names this replica to its
peers: ``POD_NAME`` (else the host name) and a random suffix, so two pickers never share one.
Whether the server is reached shows as the health service ``state-sync/<namespace>/<pool>``
(:meth:`ReplicaSync.report_health`), beside the series and the log lines of the link.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Callable, Mapping

from epp.clock import Clock
from epp.datastore.store import Datastore
from epp.framework.plugin import Plugin
from epp.framework.replication import SyncSettings
from epp.statesync.metrics import SyncMetrics
from epp.statesync.pool_sync import PoolSync
from epp.statesync.valkey import ValkeyLink
from epp.tasks import Service

__all__ = ["ReplicaSync", "replica_source"]


def replica_source() -> str:
    """This replica's name on the stream."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{secrets.token_hex(4)}"


class ReplicaSync(Service):
    """One pool's sync; ``start`` / ``stop`` (routing goes on without it either way)."""

    def __init__(
        self,
        key: tuple[str, str],
        datastore: Datastore,
        settings: SyncSettings,
        plugins: Mapping[str, Plugin],
        *,
        clock: Clock,
        metrics: SyncMetrics,
        source: str | None = None,
    ) -> None:
        self.key = key
        self.sync = PoolSync(source or replica_source(), datastore.endpoints)
        self.link = ValkeyLink(self.sync, settings, pool=key, clock=clock)
        self._metrics = metrics
        self._unsubscribe = datastore.subscribe(self.sync.in_flight.endpoints_changed)
        self.sync.bind(plugins)

    @property
    def health_name(self) -> str:
        """The health service name that says whether this pool's sync reaches its server."""
        return f"state-sync/{self.key[0]}/{self.key[1]}"

    def report_health(self, set_detail: Callable[[str, bool], None]) -> None:
        """Tell ``set_detail`` whether the server is reached, now and at each change."""
        name = self.health_name
        self.link.on_change = lambda connected: set_detail(name, connected)
        set_detail(name, self.link.connected)

    def bind(self, plugins: Mapping[str, Plugin]) -> None:
        """A reloaded configuration's plugins take over publishing and applying."""
        self.sync.bind(plugins)

    async def start(self) -> None:
        await self.link.start()

    async def stop(self) -> None:
        self._unsubscribe()
        self.sync.unbind()
        await self.link.stop()

    def refresh(self) -> None:
        """Copy the counts into the series (before a scrape)."""
        link = self.link
        self._metrics.refresh(
            self.key[1],
            self.sync.counts,
            connected=link.connected,
            peers=len(self.sync.in_flight.peers),
            disconnects=link.disconnects,
        )
