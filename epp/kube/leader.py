"""Leader election on a coordination.k8s.io/v1 Lease (``--ha-enable-leader-election``).

Several picker replicas may run; only the lease holder reports ready, so the Service (and the
gateway) send traffic to one picker at a time. Unlike upstream, followers keep reconciling and
scraping, so a failover needs no resync: the new leader is ready as soon as it holds the lease.

The protocol is client-go's: the holder renews ``renewTime`` every ``retry_period``; a candidate
takes the lease over only when ``renewTime + leaseDurationSeconds`` has passed; every write
carries the resourceVersion it read, so two candidates racing for an expired lease cannot both
win (the loser gets 409). A holder that cannot renew within ``renew_deadline`` steps down, and
on a clean stop it releases the lease so a follower takes over at once.

The Lease is named as one upstream names it (``--ha-lease-name-style``): GIE's
``epp-<ns>-<pool>.gateway-api-inference-extension.sigs.k8s.io`` (the default, and the only name
earlier versions used, so a rolling update of our own pickers keeps one lease) or the llm-d
router's ``epp-<ns>-<pool>.llm-d.ai``, to share the lease with llm-d pickers during a migration.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
from typing import Any

from epp.clock import Clock, SystemClock
from epp.config.options import LeaseNameStyle
from epp.kube.client import Api, KubeApiError, KubeError, call_json
from epp.tasks import cancel_and_wait, start_guarded

__all__ = ["LeaderElector", "lease_name", "pool_elector"]

log = logging.getLogger(__name__)

GROUP_VERSION = "coordination.k8s.io/v1"


_LEASE_SUFFIXES: dict[LeaseNameStyle, str] = {
    "gie": "gateway-api-inference-extension.sigs.k8s.io",  # GIE pkg/epp/server/controller_manager.go
    "llm-d": "llm-d.ai",  # llm-d router pkg/epp/server/controller_manager.go
}


def lease_name(namespace: str, pool_name: str, style: LeaseNameStyle = "gie") -> str:
    """Upstream's lock name (GIE's or the llm-d router's), so a mixed fleet agrees on one lease."""
    return f"epp-{namespace}-{pool_name}.{_LEASE_SUFFIXES[style]}"


def _micro_time(epoch: float) -> str:
    return datetime.datetime.fromtimestamp(epoch, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse_time(text: str | None) -> float:
    if not text:
        return 0.0
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


class LeaderElector:
    """Holds or waits for one Lease; ``is_leader`` is what readiness reads."""

    def __init__(
        self,
        api: Api,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        clock: Clock | None = None,
    ) -> None:
        if not 0 < retry_period < renew_deadline < lease_duration:
            raise ValueError(
                f"need 0 < retry_period ({retry_period}) < renew_deadline ({renew_deadline}) "
                f"< lease_duration ({lease_duration})"
            )
        self._api = api
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock or SystemClock()
        self.is_leader = False
        self._last_renew = 0.0
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        if self._task is None:
            self._task = start_guarded(self._run(), f"leader-election:{self.name}", forever=True)

    async def stop(self) -> None:
        """Stop campaigning; a held lease is released so a follower takes over without waiting.

        The release gets ``renew_deadline`` seconds (a graceful drain waits for it); if the API
        server does not answer by then, the lease simply expires after ``lease_duration``.
        """
        await cancel_and_wait(self._task)
        self._task = None
        if self.is_leader:
            self.is_leader = False
            try:
                async with asyncio.timeout(self.renew_deadline):
                    released = await self._release()
            except (KubeError, TimeoutError) as e:
                log.warning("could not release the lease", extra={"lease": self.name, "error": str(e) or "timed out"})
            else:
                if released:
                    log.info("released the lease", extra={"lease": self.name, "identity": self.identity})

    async def _run(self) -> None:
        while True:
            try:
                held = await self.try_acquire_or_renew()
            except KubeError as e:
                held = False
                log.warning("lease update failed", extra={"lease": self.name, "error": str(e)})
            now = self._clock.now()
            if held:
                self._last_renew = now
                if not self.is_leader:
                    log.info("became leader", extra={"lease": self.name, "identity": self.identity})
                self.is_leader = True
            elif self.is_leader and now - self._last_renew >= self.renew_deadline:
                log.warning("lost leadership: could not renew in time", extra={"lease": self.name})
                self.is_leader = False
            await self._clock.sleep(self.retry_period)

    def _spec(self, *, acquire_time: str, transitions: int) -> dict[str, Any]:
        return {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": int(self.lease_duration),
            "acquireTime": acquire_time,
            "renewTime": _micro_time(self._clock.wall()),
            "leaseTransitions": transitions,
        }

    async def try_acquire_or_renew(self) -> bool:
        """One round: create, renew or take over the lease; True while we hold it."""
        try:
            lease = await call_json(
                self._api, "GET", group_version=GROUP_VERSION, namespace=self.namespace, path=f"leases/{self.name}"
            )
        except KubeApiError as e:
            if e.status != 404:
                raise
            now = _micro_time(self._clock.wall())
            body = {
                "apiVersion": GROUP_VERSION,
                "kind": "Lease",
                "metadata": {"name": self.name, "namespace": self.namespace},
                "spec": self._spec(acquire_time=now, transitions=0),
            }
            return await self._write("POST", "leases", body)
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            lease["spec"] = self._spec(acquire_time=spec.get("acquireTime") or "", transitions=transitions)
            return await self._write("PUT", f"leases/{self.name}", lease)
        expires = _parse_time(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds") or 0)
        if holder and self._clock.wall() < expires:
            return False
        lease["spec"] = self._spec(acquire_time=_micro_time(self._clock.wall()), transitions=transitions + 1)
        return await self._write("PUT", f"leases/{self.name}", lease)

    async def _write(self, method: str, path: str, body: dict[str, Any]) -> bool:
        try:
            await call_json(
                self._api, method, group_version=GROUP_VERSION, namespace=self.namespace, path=path, body=body
            )
        except KubeApiError as e:
            if e.status in (409, 422):  # someone else wrote first: not ours this round
                return False
            raise
        return True

    async def _release(self) -> bool:
        lease = await call_json(
            self._api, "GET", group_version=GROUP_VERSION, namespace=self.namespace, path=f"leases/{self.name}"
        )
        spec = lease.get("spec") or {}
        if spec.get("holderIdentity") != self.identity:
            return False  # taken over meanwhile: nothing of ours to release
        spec["holderIdentity"] = ""  # an empty holder may be taken over at once
        lease["spec"] = spec
        return await self._write("PUT", f"leases/{self.name}", lease)


def pool_elector(api: Api, pool: tuple[str, str], style: LeaseNameStyle, clock: Clock) -> LeaderElector:
    """The elector of ``pool`` (namespace, name) under ``style``'s Lease name, as this pod (``POD_NAME``,
    else the host name and process id)."""
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    namespace, name = pool
    return LeaderElector(
        api, namespace=namespace, name=lease_name(namespace, name, style), identity=identity, clock=clock
    )
