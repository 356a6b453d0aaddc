"""What every V2-pipeline analyzer returns, and the engine's post-step that turns it into scaling signals.

An analyzer measures, per variant, how many instances are serving (``replica_count``), how many are
coming (``pending``), what one instance can carry (``per_replica``, in the analyzer's own unit:
KV tokens for saturation, decode tokens per second for throughput) and the demand on it; then the
model's totals, and per P/D role when the model is disaggregated (upstream's ``AnalyzerResult``).

The universal threshold post-step (upstream ``applyUniversalThreshold``) is the same formula at
model and role scope::

    required = max(0, demand / scaleUpThreshold − anticipated supply)   # ready + pending
    spare    = max(0, supply − demand / scaleDownBoundary)              # ready only

so pending replicas count as supply on the way up but can never be given back.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from epp.autoscale.types import ROLE_BOTH

__all__ = ["NO_DATA", "AnalyzerResult", "RoleCapacity", "VariantCapacity", "by_role", "calibrate", "informative"]

NO_DATA = "no-data"


@dataclass(frozen=True, slots=True)
class VariantCapacity:
    """One variant as an analyzer sees it."""

    name: str
    role: str = ROLE_BOTH
    cost: float = 10.0
    accelerator: str = ""
    replica_count: int = 0
    pending: int = 0
    per_replica: float = 0.0
    demand: float = 0.0
    reason: str = ""

    @property
    def capacity(self) -> float:
        return self.replica_count * self.per_replica

    @property
    def utilization(self) -> float:
        return self.demand / self.capacity if self.capacity > 0 else 0.0


@dataclass(frozen=True, slots=True)
class RoleCapacity:
    """Totals of one P/D role, and its signals once calibrated."""

    supply: float = 0.0
    anticipated: float = 0.0
    demand: float = 0.0
    required: float = 0.0
    spare: float = 0.0


@dataclass(frozen=True, slots=True)
class AnalyzerResult:
    """One analyzer's view of one model this cycle."""

    analyzer: str
    variants: tuple[VariantCapacity, ...] = ()
    supply: float = 0.0
    anticipated: float = 0.0
    demand: float = 0.0
    roles: Mapping[str, RoleCapacity] = field(default_factory=dict)
    """Per role; empty unless some variant is ``prefill`` or ``decode``."""
    required: float = 0.0
    spare: float = 0.0
    scale_up: float = 0.85
    scale_down: float = 0.70
    """The thresholds :func:`calibrate` used."""

    @property
    def utilization(self) -> float:
        return self.demand / self.supply if self.supply > 0 else 0.0

    def totals(self, role: str) -> tuple[float, float]:
        """``(demand, ready supply)`` at the role's scope (the model's when not disaggregated)."""
        r = self.roles.get(role)
        return (r.demand, r.supply) if r is not None else (self.demand, self.supply)

    def per_replica(self, name: str) -> float:
        return next((v.per_replica for v in self.variants if v.name == name), 0.0)

    def signals(self, role: str) -> tuple[float, float]:
        """``(required, spare)`` at the role's scope (the model's when not disaggregated)."""
        if self.roles:
            r = self.roles.get(role)
            return (r.required, r.spare) if r is not None else (0.0, 0.0)
        return self.required, self.spare


def by_role(
    variants: Sequence[VariantCapacity], extra: Mapping[str, float] | None = None, *, own_demand: bool = True
) -> dict[str, RoleCapacity]:
    """Per-role supply, anticipated supply and demand; empty when every variant is ``both``.

    Demand is the variants' own (unless ``own_demand`` is false) plus ``extra`` per role.
    """
    if all(v.role == ROLE_BOTH for v in variants):
        return {}
    out: dict[str, RoleCapacity] = {}
    for v in variants:
        r = out.get(v.role, RoleCapacity())
        out[v.role] = RoleCapacity(
            supply=r.supply + v.capacity,
            anticipated=r.anticipated + (v.replica_count + v.pending) * v.per_replica,
            demand=r.demand + (v.demand if own_demand else 0.0),
        )
    for role, more in (extra or {}).items():
        if role in out:
            out[role] = replace(out[role], demand=out[role].demand + more)
    return out


def calibrate(result: AnalyzerResult, scale_up: float, scale_down: float) -> AnalyzerResult:
    """Write ``required`` and ``spare`` at every scope (upstream's universal threshold post-step)."""

    def req(demand: float, anticipated: float) -> float:
        return max(0.0, demand / scale_up - anticipated)

    def spare(supply: float, demand: float) -> float:
        return max(0.0, supply - demand / scale_down)

    roles = {
        role: replace(r, required=req(r.demand, r.anticipated), spare=spare(r.supply, r.demand))
        for role, r in result.roles.items()
    }
    return replace(
        result,
        roles=roles,
        required=req(result.demand, result.anticipated),
        spare=spare(result.supply, result.demand),
        scale_up=scale_up,
        scale_down=scale_down,
    )


def informative(result: AnalyzerResult | None) -> bool:
    """True when some variant carries a usable capacity (upstream ``ResultIsInformative``)."""
    return result is not None and any(v.reason != NO_DATA and v.per_replica > 0 for v in result.variants)
