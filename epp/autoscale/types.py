"""Identities and per-replica readings shared by every autoscaler module.

Keys are tuples, never joined strings: model IDs such as ``meta/llama-3.1-8b`` contain ``/``, and
a model served in two namespaces must be two groups (upstream's namespace-collision fix).

A reading is per *instance*: a pod, or one data-parallel rank of a pod (upstream #1121, #1469
count a DP=8 pod as eight engines with their own KV cache and queue). Besides the V1 pair (KV-cache
use, waiting requests), a reading carries what the V2 and throughput analyzers need: the KV token
capacity, the workload shape (average prompt and output tokens, prefix-cache hit rate) and the
rates (inter-token latency, completed requests, generated tokens). A field the source could not
read stays 0, which every analyzer treats as "unknown".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ROLE_BOTH", "ROLE_DECODE", "ROLE_PREFILL", "ModelKey", "ReplicaMetrics", "VariantKey"]

ROLE_BOTH = "both"
ROLE_PREFILL = "prefill"
ROLE_DECODE = "decode"


@dataclass(frozen=True, slots=True, order=True)
class VariantKey:
    """One variant: the HPA, ScaledObject or VariantAutoscaling that declares it, ``namespace/name``."""

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
    """One Ready instance's load and shape; ``instance`` is the pod, or ``pod:rank`` for a DP rank."""

    pod: str
    kv_cache_usage: float
    queue_length: float
    instance: str = ""
    kv_instant: float = -1.0
    """KV use at this instant (the throughput analyzer's k*); -1: same as ``kv_cache_usage``."""
    tokens_capacity: int = 0
    """KV-cache capacity in tokens: ``num_gpu_blocks × block_size`` (SGLang: ``max_total_num_tokens``)."""
    avg_input_tokens: float = 0.0
    avg_output_tokens: float = 0.0
    prefix_hit_rate: float = 0.0
    avg_itl: float = 0.0
    """Seconds between output tokens, averaged over the recent window."""
    request_rate: float = 0.0
    """Completed requests per second."""
    generation_rate: float = 0.0
    """Generated tokens per second."""

    @property
    def key(self) -> str:
        return self.instance or self.pod

    @property
    def k_now(self) -> float:
        return self.kv_cache_usage if self.kv_instant < 0 else self.kv_instant

    @property
    def tokens_in_use(self) -> int:
        """KV tokens held now (upstream: round(kv use × capacity), clamped to the capacity)."""
        if self.tokens_capacity <= 0:
            return 0
        return max(0, min(self.tokens_capacity, round(self.kv_cache_usage * self.tokens_capacity)))
