"""gRPC health for the picker: liveness always, everything else only once the pool is synced.

Upstream without leader election answers SERVING for *any* service name once the pool is synced
(its Helm chart probes ``inference-extension``), and with leader election distinguishes
``liveness`` (always SERVING) from ``readiness``, ``""`` and the ext_proc service name. We answer
the union: ``liveness`` is always SERVING; every other name follows readiness. So both chart
variants and Envoy's cluster health check (service ``envoy.service.ext_proc.v3.ExternalProcessor``)
work. Readiness is pushed with :meth:`HealthState.set_ready` (from the event loop); ``Watch``
streams see each change and end at shutdown so they never hold up a graceful stop.

Details: a part that can fail without the picker failing (the state sync with the other
replicas, ``--state-sync-address``; a precise index on Valkey/Redis) gets a name of its own
(:meth:`HealthState.set_detail`, ``state-sync/<namespace>/<pool>``,
``kv-index/<namespace>/<pool>/<plugin>``): SERVING while ready and the part is well, NOT_SERVING
otherwise, listed by ``List``; readiness and every other name ignore it, so a replica that lost its
Valkey server stays in the Service and keeps routing on its own view. Plugins are made before the
server: :class:`DetailRelay` holds what they tell until it is bound to the server's state.

Graceful drain (SIGTERM): :meth:`HealthState.drain` turns every name but ``liveness`` NOT_SERVING
at once, so kubelet takes the pod out of the Service while it still serves streams, and the
liveness probe never restarts it mid-drain (the chart's ``inference-extension`` name goes
NOT_SERVING too, as upstream's does without leader election). The server drains only the health
port's state: the ext_proc port's (what a gateway's active health check asks) keeps its status
until the server stops, as upstream's ``--health-checking`` service does, so a gateway keeps
sending the streams the picker still serves during the window.
"""

from __future__ import annotations

import asyncio
from typing import Any

from epp.extproc import pb

__all__ = ["LIVENESS", "READINESS", "DetailRelay", "HealthState"]

LIVENESS = "liveness"
READINESS = "readiness"
_SERVING: int = pb.HealthCheckResponse.SERVING
_NOT_SERVING: int = pb.HealthCheckResponse.NOT_SERVING


class HealthState(pb.HealthServicer):  # type: ignore[misc]  # generated base class is untyped
    """The ``grpc.health.v1.Health`` service (Check, Watch, List) over one readiness flag."""

    def __init__(self) -> None:
        self._ready = False
        self._draining = False
        self._stopping = False
        self._changed = asyncio.Event()
        self._details: dict[str, bool] = {}

    @property
    def ready(self) -> bool:
        """True while readiness-dependent services answer SERVING."""
        return self._ready and not self._draining and not self._stopping

    def set_ready(self, ready: bool) -> None:
        """Flip readiness (call on the event loop); watchers are told at once."""
        if ready != self._ready:
            self._ready = ready
            self._notify()

    def set_detail(self, service: str, ok: bool) -> None:
        """The part named ``service`` is well (or not); watchers of that name are told at once."""
        if self._details.get(service) != ok:
            self._details[service] = ok
            self._notify()

    def drain(self) -> None:
        """Everything but liveness turns NOT_SERVING for good; Watch streams see it and stay open."""
        if not self._draining:
            self._draining = True
            self._notify()

    def shutdown(self) -> None:
        """Everything but liveness turns NOT_SERVING for good; open Watch streams end."""
        if not self._stopping:
            self._stopping = True
            self._notify()

    def status(self, service: str) -> int:
        """The serving status reported for ``service``."""
        if service == LIVENESS:
            return _SERVING
        return _SERVING if self.ready and self._details.get(service, True) else _NOT_SERVING

    def _notify(self) -> None:
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def Check(self, request: pb.HealthCheckRequest, context: Any) -> pb.HealthCheckResponse:  # noqa: N802 (gRPC method name)
        return pb.HealthCheckResponse(status=self.status(request.service))

    async def List(self, request: pb.HealthListRequest, context: Any) -> pb.HealthListResponse:  # noqa: N802 (gRPC method name)
        response = pb.HealthListResponse()
        for service in ("", LIVENESS, READINESS, pb.EXT_PROC_SERVICE, *self._details):
            response.statuses[service].status = self.status(service)
        return response

    async def Watch(self, request: pb.HealthCheckRequest, context: Any) -> None:  # noqa: N802 (gRPC method name)
        last = None
        while True:
            changed = self._changed  # Taken before reading the status, so no change is missed.
            status = self.status(request.service)
            if status != last:
                await context.write(pb.HealthCheckResponse(status=status))
                last = status
            if self._stopping:
                return
            await changed.wait()


class DetailRelay:
    """Health details told before the server exists, handed to its :class:`HealthState` once bound."""

    def __init__(self) -> None:
        self._target: HealthState | None = None
        self._held: dict[str, bool] = {}

    def set_detail(self, service: str, ok: bool) -> None:
        if self._target is None:
            self._held[service] = ok
        else:
            self._target.set_detail(service, ok)

    def bind(self, health: HealthState) -> None:
        """From now on details go to ``health``, those told so far first."""
        self._target = health
        held, self._held = self._held, {}
        for service, ok in held.items():
            health.set_detail(service, ok)
