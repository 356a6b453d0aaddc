"""A variant's target for this cycle and why: what every analyzer path produces and every output reads.

The reason (``Reason.value``) goes to the VariantAutoscaling status, the logs, the Kubernetes
Event and ``wva_replica_scaling_total``; the message carries the numbers. ``signals`` are the
saturation gauges upstream publishes per variant (``wva_saturation_utilization``,
``wva_required_capacity``, ``wva_spare_capacity``, ``wva_kv_cache_tokens_*``): V1 reports a 0/1
scale-up signal and the spare KV fraction (unit ``binary``), V2 token magnitudes (``continuous``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from epp.autoscale.types import VariantKey

__all__ = ["Decision", "Reason", "Signals"]


class Reason(enum.Enum):
    """Why a variant's target is what it is; ``value`` is written to status and logs."""

    SATURATED = "saturated"  # scale-up: capacity short of demand (V1: average spare below a trigger)
    TIMEOUT = "timeout"  # scale-up although replicas are pending: they exceeded --pending-timeout
    SCALE_DOWN = "scale-down"  # the load fits on fewer replicas (every live analyzer agrees)
    PENDING = "pending"  # scale-up wanted, but replicas that are not Ready yet cover it / block it
    COOLDOWN = "cooldown"  # held at the previous target until the workload reaches it (V1)
    LIMIT = "limit"  # minReplicas / maxReplicas decided (or blocked) the move
    QUOTA = "quota"  # a quota limiter cut the scale-up
    IDLE = "idle"  # scale-to-zero: no requests for the retention period
    STEADY = "steady"  # nothing to do
    NO_METRICS = "no-metrics"  # no Ready replica of the group reported load
    INACTIVE = "inactive"  # the workload is at zero replicas and nothing waits for it
    WAKE = "scale-from-zero"  # 0 → 1: the picker holds requests for the model (WVA's scale-from-zero)

    @property
    def condition_reason(self) -> str:
        """CamelCase form for a Kubernetes condition's ``reason``."""
        return "".join(part.capitalize() for part in self.value.split("-"))


@dataclass(frozen=True, slots=True)
class Signals:
    """The saturation reading behind a decision, for the ``wva_*`` saturation gauges."""

    utilization: float = 0.0
    required: float = 0.0
    spare: float = 0.0
    unit: str = "binary"
    tokens_used: int = 0
    tokens_capacity: int = 0


@dataclass(frozen=True, slots=True)
class Decision:
    """The target for one variant this cycle, with the reason and a human-readable message."""

    variant: VariantKey
    current: int
    target: int
    reason: Reason
    message: str = ""
    signals: Signals | None = None
    limited_by: str = ""

    @property
    def action(self) -> str:
        if self.target > self.current:
            return "scale-up"
        if self.target < self.current:
            return "scale-down"
        return "no-change"
