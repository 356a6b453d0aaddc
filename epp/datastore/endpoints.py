"""Pod → endpoints: which pods may receive traffic, and the one endpoint per active target port.

Pure functions, so the store and the tests share one definition of "eligible" and of the
``<pod>-rank-<idx>`` naming (upstream ``podUpdateOrAddIfNotExist`` / ``extractActivePorts``):

- a pod is eligible iff it is Ready, not terminating, in the pool's namespace, has an IP and its
  labels match the pool selector;
- each target port at index ``idx`` gives endpoint ``<pod>-rank-<idx>``; the pod annotation
  ``inference.networking.k8s.io/active-ports`` (comma-separated) restricts which ports are active:
  present → only the listed ports that are target ports (unknown or malformed entries ignored, so
  an empty annotation means none); absent → all;
- the address is kept raw (IPv6 unbracketed): :attr:`Endpoint.hostport` brackets it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType

from epp.datastore.types import ACTIVE_PORTS_ANNOTATION, PodInfo, PoolSpec
from epp.framework.endpoint import Endpoint

__all__ = ["active_ports", "endpoint_name", "is_eligible", "pod_endpoints"]


def endpoint_name(pod_name: str, rank: int) -> str:
    """Upstream endpoint naming: ``<pod>-rank-<idx>``, idx being the target port's index."""
    return f"{pod_name}-rank-{rank}"


def is_eligible(pod: PodInfo, pool: PoolSpec) -> bool:
    """May this pod receive traffic from ``pool``? (Ready, not deleting, same namespace, selected.)"""
    return (
        pod.ready
        and not pod.deleting
        and bool(pod.ip)
        and pod.namespace == pool.namespace
        and pool.selector.matches(pod.labels)
    )


def active_ports(annotations: Mapping[str, str], target_ports: Sequence[int]) -> frozenset[int]:
    """The target ports the pod serves on, per the active-ports annotation (all when absent)."""
    raw = annotations.get(ACTIVE_PORTS_ANNOTATION)
    if raw is None:
        return frozenset(target_ports)
    allowed = set(target_ports)
    ports: set[int] = set()
    for part in raw.split(","):
        part = part.strip()
        if part.isascii() and part.isdigit() and int(part) in allowed:
            ports.add(int(part))
    return frozenset(ports)


def pod_endpoints(pod: PodInfo, pool: PoolSpec, *, metrics_port: int = 0) -> tuple[Endpoint, ...]:
    """The endpoints ``pod`` contributes to ``pool`` (empty when it is not eligible).

    ``metrics_port`` is the deprecated ``--model-server-metrics-port``: it applies only when the
    pool has exactly one target port; otherwise each rank is scraped on its own target port.
    """
    if not is_eligible(pod, pool):
        return ()
    active = active_ports(pod.annotations, pool.target_ports)
    if not active:
        return ()
    labels: Mapping[str, str] = MappingProxyType(dict(pod.labels))
    override = metrics_port if len(pool.target_ports) == 1 else 0
    return tuple(
        Endpoint(
            namespace=pod.namespace,
            name=endpoint_name(pod.name, idx),
            pod_name=pod.name,
            address=pod.ip,
            port=port,
            rank=idx,
            metrics_port=override or port,
            labels=labels,
        )
        for idx, port in enumerate(pool.target_ports)
        if port in active
    )
