"""Where the autoscaler's inputs come from: the :class:`MetricsSource` seam and what crosses it.

Two sources implement it: :class:`~epp.autoscale.scrape.ScrapeSource` reads each Ready pod's
``/metrics`` directly (no Prometheus needed) and :class:`~epp.autoscale.prometheus.PrometheusSource`
runs upstream WVA's PromQL. Both return readings only for the pods the controller asks about, so
pods of deleted or foreign workloads never count. Model-level signals from the picker (requests
waiting in its flow-control queue, requests arriving) come with them: from Prometheus, or from the
pickers named with ``--epp-metrics-url`` (:mod:`epp.autoscale.wake`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from epp.autoscale.types import ModelKey, ReplicaMetrics

__all__ = ["InputError", "MetricsSource", "ModelSignals", "PodTarget"]


class InputError(Exception):
    """Load for a model group could not be read this cycle (the message says from where and why)."""


@dataclass(frozen=True, slots=True)
class PodTarget:
    """A Ready pod to read: its identity, where its ``/metrics`` is, and its engine type."""

    namespace: str
    name: str
    address: str
    port: int
    engine: str = "vllm"


@dataclass(frozen=True, slots=True)
class ModelSignals:
    """What the picker knows of one model: requests queued in flow control, and arriving per second."""

    queue_size: float = 0.0
    queue_bytes: float = 0.0
    arrival_rate: float = 0.0


class MetricsSource(Protocol):
    """Where the autoscaler's inputs come from."""

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> list[ReplicaMetrics]:
        """Readings of those of ``pods`` that reported (one per instance); raises :class:`InputError`."""
        ...

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        """True only with evidence of no requests during the last ``window`` seconds."""
        ...

    async def model_signals(self, key: ModelKey) -> ModelSignals | None:
        """The picker's view of the model, when this source can read it (else None)."""
        ...
