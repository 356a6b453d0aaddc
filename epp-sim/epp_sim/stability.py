"""The stability gate autoscaler tests and ``epp dev`` use before generating load (upstream PR #549's e2e check).

A Deployment is stable when ``spec.replicas == status.replicas == status.readyReplicas`` (no pod
in transition) and its controller has seen the latest spec (``status.observedGeneration``, when
reported, is not behind ``metadata.generation``). Measuring scale-up from anything else mixes the
autoscaler's decisions with pods still starting from the previous step.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from epp.autoscale.cluster import Cluster
from epp_sim.waits import wait_until

__all__ = ["deployment_stable", "wait_stable"]


def deployment_stable(obj: Mapping[str, Any]) -> bool:
    """True when no replica of the Deployment is starting or stopping."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    observed = status.get("observedGeneration")
    if observed is not None and meta.get("generation") is not None and observed < meta["generation"]:
        return False
    desired = 1 if spec.get("replicas") is None else spec["replicas"]
    return bool(desired == (status.get("replicas") or 0) == (status.get("readyReplicas") or 0))


async def wait_stable(
    cluster: Cluster, namespace: str, names: Sequence[str], *, timeout: float = 300.0, interval: float = 1.0
) -> None:
    """Poll until every named Deployment is stable; ``TimeoutError`` names the ones that are not."""
    unstable: list[str] = list(names)

    async def all_stable() -> bool:
        by_name = {str((d.get("metadata") or {}).get("name")): d for d in await cluster.list_deployments(namespace)}
        unstable[:] = [n for n in names if n not in by_name or not deployment_stable(by_name[n])]
        return not unstable

    try:
        await wait_until(all_stable, timeout=timeout, interval=interval)
    except TimeoutError:
        raise TimeoutError(f"Deployments in {namespace} not stable after {timeout}s: {', '.join(unstable)}") from None
