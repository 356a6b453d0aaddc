"""Kubernetes Events on decisions (upstream #1107), on the object that declares the variant.

Upstream's reasons: ``ScaledUp``, ``ScaledDown``, ``ScaledToZero`` (Normal) when a target moves;
``ResourceConstrained`` (Warning) when a limiter cut it; ``MetricsUnavailable``,
``OptimizationFailed`` and ``AcceleratorNotResolved`` (Warning) when a variant cannot be decided
well. At most one Event per variant per cycle, except ``ResourceConstrained``, which may join a
``ScaledUp`` (as upstream). Upstream attaches them to the in-memory VariantAutoscaling it
synthesises (an object no one can ``kubectl describe``); here they go on the HPA, ScaledObject or
VariantAutoscaling itself.

Messages are fixed per outcome, so a repeat is the same Event with a higher ``count`` (what
client-go's event correlator does: the first occurrence is POSTed, repeats PATCH ``count`` and
``lastTimestamp``). A failed write is logged and never stops a cycle.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass

from epp.autoscale.cluster import Cluster
from epp.autoscale.variants import VariantSpec
from epp.clock import Clock
from epp.kube.client import KubeApiError, KubeError

__all__ = ["COMPONENT", "EventRecorder", "Kind"]

log = logging.getLogger(__name__)

COMPONENT = "epp-autoscale"


@dataclass(frozen=True, slots=True)
class Kind:
    """An Event reason and its type."""

    reason: str
    warning: bool = False


SCALED_UP = Kind("ScaledUp")
SCALED_DOWN = Kind("ScaledDown")
SCALED_TO_ZERO = Kind("ScaledToZero")
RESOURCE_CONSTRAINED = Kind("ResourceConstrained", warning=True)
METRICS_UNAVAILABLE = Kind("MetricsUnavailable", warning=True)
OPTIMIZATION_FAILED = Kind("OptimizationFailed", warning=True)
ACCELERATOR_NOT_RESOLVED = Kind("AcceleratorNotResolved", warning=True)


def _time(wall: float) -> str:
    return dt.datetime.fromtimestamp(int(wall), dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class EventRecorder:
    """Writes Events through the :class:`Cluster`; call :meth:`next_cycle` at the start of each cycle."""

    def __init__(self, cluster: Cluster, clock: Clock) -> None:
        self._cluster = cluster
        self._clock = clock
        self._this_cycle: set[tuple[str, str]] = set()
        self._seen: dict[tuple[str, ...], tuple[str, int]] = {}  # event identity → (name, count)
        self._serial = 0

    def next_cycle(self) -> None:
        self._this_cycle.clear()

    async def record(self, variant: VariantSpec, kind: Kind, message: str) -> None:
        """One Event on ``variant``'s declaring object (deduplicated per cycle, aggregated across)."""
        ns, name = variant.key.namespace, variant.key.name
        if kind is not RESOURCE_CONSTRAINED:
            if (ns, name) in self._this_cycle:
                return
            self._this_cycle.add((ns, name))
        identity = (ns, variant.source.value, name, variant.uid, kind.reason, message)
        now = _time(self._clock.wall())
        try:
            if identity in self._seen:
                event, count = self._seen[identity]
                try:
                    await self._cluster.patch_event(ns, event, {"count": count + 1, "lastTimestamp": now})
                    self._seen[identity] = (event, count + 1)
                    return
                except KubeApiError as e:
                    if e.status != 404:
                        raise
            self._serial += 1
            event = f"{name}.{int(self._clock.wall() * 1e6):x}{self._serial:x}"
            await self._cluster.create_event(
                ns,
                {
                    "apiVersion": "v1",
                    "kind": "Event",
                    "metadata": {"name": event, "namespace": ns},
                    "involvedObject": {
                        "apiVersion": variant.source.api_version,
                        "kind": variant.source.value,
                        "name": name,
                        "namespace": ns,
                        "uid": variant.uid,
                    },
                    "reason": kind.reason,
                    "message": message,
                    "type": "Warning" if kind.warning else "Normal",
                    "source": {"component": COMPONENT},
                    "reportingComponent": COMPONENT,
                    "reportingInstance": COMPONENT,
                    "firstTimestamp": now,
                    "lastTimestamp": now,
                    "count": 1,
                },
            )
            self._seen[identity] = (event, 1)
        except KubeError as e:
            log.warning(
                "cannot record an Event", extra={"variant": str(variant.key), "reason": kind.reason, "error": str(e)}
            )

    def retain(self, variants: set[tuple[str, str]]) -> None:
        """Forget the Events of variants that are gone."""
        for identity in [i for i in self._seen if (i[0], i[2]) not in variants]:
            del self._seen[identity]
