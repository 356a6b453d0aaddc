"""What ``epp bench routing`` runs: servers, strategies, workloads, offered loads and simulated time.

Checked once when built, so an unknown strategy or workload (or ``precise`` on a workload without
real tokens, or a P/D strategy on one server) fails before any simulator starts; ``quick()`` is
the shape CI runs. Strategies and picker replicas left unset are each workload's own
(:meth:`RoutingOptions.plan`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epp_sim.bench.routing.strategies import (
    DEFAULT,
    DEFAULT_STRATEGIES,
    NEEDS_REAL_TOKENS,
    ROUND_ROBIN,
    STRATEGIES,
    prefill_pods,
)
from epp_sim.bench.workloads import DEFAULT_WORKLOADS, WORKLOADS

__all__ = ["RoutingOptions"]


@dataclass(frozen=True)
class RoutingOptions:
    """What to run; ``quick()`` is the CI smoke-test shape."""

    servers: int = 8
    strategies: tuple[str, ...] | None = None
    """None: each workload's own (its ``strategies``, else :data:`DEFAULT_STRATEGIES`)."""
    replicas: tuple[int, ...] | None = None
    """Picker replicas each strategy runs with; None: each workload's own."""
    workloads: tuple[str, ...] = DEFAULT_WORKLOADS
    loads: tuple[float, ...] = (0.4, 0.7, 1.0, 1.3)
    sim_seconds: float = 16.0
    warmup_fraction: float = 0.25
    time_scale: float = 4.0
    drain_sim_seconds: float = 20.0
    seed: int = 1

    def __post_init__(self) -> None:
        if self.strategies is not None:
            unknown = [s for s in self.strategies if s not in STRATEGIES]
            if unknown or not self.strategies:
                raise ValueError(f"unknown strategies {unknown}; known: {list(STRATEGIES)}")
        unknown = [w for w in self.workloads if w not in WORKLOADS]
        if unknown or not self.workloads:
            raise ValueError(f"unknown workloads {unknown}; known: {list(WORKLOADS)}")
        for name in self.workloads:
            strategies, _ = self.plan(name)
            if not WORKLOADS[name].real_tokens and NEEDS_REAL_TOKENS.intersection(strategies):
                real = [w.name for w in WORKLOADS.values() if w.real_tokens]
                raise ValueError(f"{sorted(NEEDS_REAL_TOKENS)} need a workload with real token ids: {real}")
            for strategy in strategies:
                prefill_pods(strategy, self.servers)  # a P/D strategy needs a pod of each role
        if self.replicas is not None and (not self.replicas or min(self.replicas) < 1 or max(self.replicas) > 8):
            raise ValueError(f"replicas must be within 1..8, got {self.replicas}")
        if not 1 <= self.servers <= 200:
            raise ValueError(f"servers must be within 1..200, got {self.servers}")
        if not self.loads or min(self.loads) <= 0:
            raise ValueError(f"loads must be > 0, got {self.loads}")
        if self.sim_seconds <= 0 or self.time_scale <= 0 or self.drain_sim_seconds <= 0:
            raise ValueError("sim seconds, time scale and drain seconds must be > 0")
        if not 0 <= self.warmup_fraction < 1:
            raise ValueError(f"warmup fraction must be in [0, 1), got {self.warmup_fraction}")

    def plan(self, workload: str) -> tuple[tuple[str, ...], tuple[int, ...]]:
        """(strategies, picker replicas) to run ``workload`` with."""
        w = WORKLOADS[workload]
        if self.strategies is not None:
            strategies = self.strategies
        elif w.strategies is not None:
            strategies = w.strategies
        else:
            strategies = DEFAULT_STRATEGIES
        return strategies, self.replicas if self.replicas is not None else w.replicas

    @classmethod
    def quick(cls, **overrides: Any) -> RoutingOptions:
        """Two servers, two strategies, one load, a few simulated seconds."""
        base: dict[str, Any] = {
            "servers": 2,
            "strategies": (ROUND_ROBIN, DEFAULT),
            "workloads": ("shared-prefix",),
            "loads": (0.5,),
            "sim_seconds": 3.0,
            "drain_sim_seconds": 20.0,
        }
        base.update(overrides)
        return cls(**base)
