"""What scales workloads in a real cluster, simulated for the fake one: the HPA controller and KEDA.

:class:`ClusterScalers` runs them together against a :class:`~epp_sim.apiserver.store.Store`, each
:meth:`~ClusterScalers.sync` in the order a real cluster converges: the stand-in Prometheus scrapes
its targets (the autoscaler's ``/metrics``), KEDA reconciles ScaledObjects (their HPAs,
activation), the HPA controller scales. Tests call ``sync()`` on a manual clock; ``run()`` loops.

KEDA's ScaledObject and the LeaderWorkerSet are served from CRDs, as in a real cluster: trimmed
copies of the two projects' CRDs (the fields used here, the rest kept unpruned) ship next to this
module, :data:`SCALED_OBJECT_CRD` and :data:`LEADER_WORKER_SET_CRD`.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

from epp.clock import Clock, SystemClock
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.store import Store
from epp_sim.scalers.hpa import HpaController
from epp_sim.scalers.keda import ClusterMetrics, KedaOperator
from epp_sim.scalers.prometheus import PrometheusStandIn, ScrapeTarget

__all__ = ["LEADER_WORKER_SET_CRD", "SCALED_OBJECT_CRD", "ClusterScalers", "PrometheusStandIn", "ScrapeTarget"]

log = logging.getLogger(__name__)

SCALED_OBJECT_CRD = Path(__file__).with_name("keda.sh_scaledobjects.yaml")
LEADER_WORKER_SET_CRD = Path(__file__).with_name("leaderworkerset.x-k8s.io_leaderworkersets.yaml")


class ClusterScalers:
    """The stand-in Prometheus, KEDA and the HPA controller, synced together."""

    def __init__(
        self, store: Store, prometheus: PrometheusStandIn, *, clock: Clock | None = None, sync_period: float = 15.0
    ) -> None:
        self._clock = clock or SystemClock()
        self.prometheus = prometheus
        self.keda = KedaOperator(store, prometheus, clock=self._clock)
        self.hpa = HpaController(store, ClusterMetrics(prometheus, self.keda), clock=self._clock)
        self.sync_period = sync_period

    async def sync(self) -> None:
        """Scrape, then KEDA, then the HPAs: one pass."""
        await self.prometheus.scrape()
        await self.keda.sync()
        await self.hpa.sync()

    async def run(self) -> None:
        """Sync every ``sync_period`` until cancelled; a failed pass is logged and retried."""
        while True:
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except (ApiError, OSError, RuntimeError) as e:
                log.warning("cluster scalers sync failed", extra={"error": str(e)})
            await self._clock.sleep(self.sync_period)
