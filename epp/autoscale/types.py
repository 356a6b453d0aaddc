"""Identities and per-replica readings shared by every autoscaler module.

Keys are tuples, never joined strings: model IDs such as ``meta/llama-3.1-8b`` contain ``/``, and
a model served in two namespaces must be two groups (upstream's namespace-collision fix).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ModelKey", "ReplicaMetrics", "VariantKey"]


@dataclass(frozen=True, slots=True, order=True)
class VariantKey:
    """One VariantAutoscaling: ``namespace/name``."""

    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True, slots=True, order=True)
class ModelKey:
    """One model group: every variant serving ``model_id`` in ``namespace``."""

    namespace: str
    model_id: str

    def __str__(self) -> str:
        return f"{self.model_id} in {self.namespace}"


@dataclass(frozen=True, slots=True)
class ReplicaMetrics:
    """One Ready pod's load: KV-cache use (0..1) and waiting requests."""

    pod: str
    kv_cache_usage: float
    queue_length: float
