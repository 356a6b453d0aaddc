"""The GPU quota limiter (upstream #1129): operator-declared caps on accelerators, cluster- or namespace-wide.

Declared under ``limiters:`` on the saturation ConfigMap's ``default`` entry, upstream's schema
(``name``, ``type: quota``, ``scope``, ``quotas`` or ``namespaceQuotas``, ``exclude``) and
validation rules (unique non-empty names, the scope's own map only, values ``>= -1`` and ``<=
2^20``, non-empty type and namespace keys), every problem reported at once. It applies only with
``enableLimiter: true``, as upstream.

Per cycle, usage is what the variants run now (``current × GPUs per replica``), by accelerator
and by (namespace, accelerator). Scale-up proposals are served in order (higher ``priority``
first, then the least spare capacity, then the cheapest, as upstream's greedy-by-saturation
order) and each gets ``min(requested, remaining)`` GPUs from every limiter in declaration order,
in whole replicas. ``-1`` is unlimited; a type a cap map does not list is denied; an excluded
namespace passes through a namespace limiter; a namespace that is not listed takes the reserved
``default`` key's caps as its own budget (not a shared pool). An accelerator that could not be
resolved is denied (fail closed) unless the limiter knows exactly one type, which it then is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_QUOTA",
    "UNLIMITED",
    "Proposal",
    "QuotaError",
    "QuotaLimiter",
    "apply_limiters",
    "parse_quota_limiters",
]

UNLIMITED = -1
MAX_QUOTA = 1 << 20
_RESERVED = "default"
_UNRESOLVED = ("", "unknown", "unresolved")


class QuotaError(ValueError):
    """Quota limiter entries that cannot be used; the message lists every problem found."""


@dataclass(frozen=True, slots=True)
class QuotaLimiter:
    """One ``type: quota`` entry."""

    name: str
    scope: str  # "cluster" or "namespace"
    quotas: Mapping[str, int] = field(default_factory=dict)
    namespace_quotas: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    exclude: tuple[str, ...] = ()

    def caps(self, namespace: str) -> Mapping[str, int] | None:
        """The per-type caps that bind ``namespace``; None: this limiter lets it through."""
        if self.scope == "cluster":
            return self.quotas
        if namespace in self.exclude:
            return None
        if namespace in self.namespace_quotas:
            return self.namespace_quotas[namespace]
        return self.namespace_quotas.get(_RESERVED, {})

    def known_types(self) -> set[str]:
        if self.scope == "cluster":
            return set(self.quotas)
        return {t for caps in self.namespace_quotas.values() for t in caps}


def _check_caps(caps: Any, where: str, errors: list[str]) -> dict[str, int]:
    if not isinstance(caps, Mapping):
        errors.append(f"{where}: expected a map of accelerator type to GPUs, got {caps!r}")
        return {}
    out: dict[str, int] = {}
    for acc, value in caps.items():
        if not str(acc).strip():
            errors.append(f"{where}: accelerator type name must not be empty")
            continue
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{where}[{acc!r}]={value!r}: must be an integer")
            continue
        if value < UNLIMITED:
            errors.append(f"{where}[{acc!r}]={value}: must be >= -1 (only -1 is negative: unlimited)")
        elif value > MAX_QUOTA:
            errors.append(f"{where}[{acc!r}]={value}: exceeds the maximum of {MAX_QUOTA}")
        out[str(acc)] = value
    return out


def parse_quota_limiters(entries: Sequence[Mapping[str, Any]]) -> tuple[QuotaLimiter, ...]:
    """Validate ``type: quota`` entries as upstream's ``QuotaLimiterEntries.Validate`` does."""
    errors: list[str] = []
    seen: dict[str, int] = {}
    out: list[QuotaLimiter] = []
    allowed = {"name", "type", "scope", "quotas", "namespaceQuotas", "exclude"}
    for i, entry in enumerate(entries):
        unknown = sorted(set(entry) - allowed)
        if unknown:
            errors.append(f"limiters[{i}]: unknown field(s) {', '.join(unknown)}")
        name = str(entry.get("name") or "")
        if not name:
            errors.append(f"limiters[{i}]: name must not be empty")
            continue
        if name in seen:
            errors.append(f"limiters[{i}]: duplicate limiter name {name!r} (first seen at limiters[{seen[name]}])")
            continue
        seen[name] = i
        where = f"limiters[{i}] ({name!r})"
        if entry.get("type") != "quota":
            errors.append(f"{where}: type must be 'quota', got {entry.get('type')!r}")
        scope = entry.get("scope")
        exclude = [str(ns) for ns in entry.get("exclude") or ()]
        if scope == "cluster":
            if entry.get("namespaceQuotas"):
                errors.append(f"{where}: namespaceQuotas is invalid for cluster scope; use quotas")
            if exclude:
                errors.append(f"{where}: exclude is invalid for cluster scope")
            caps = _check_caps(entry.get("quotas") or {}, f"{where}.quotas", errors)
            out.append(QuotaLimiter(name, "cluster", quotas=caps))
        elif scope == "namespace":
            if entry.get("quotas"):
                errors.append(f"{where}: quotas is invalid for namespace scope; use namespaceQuotas")
            if any(not ns.strip() for ns in exclude):
                errors.append(f"{where}: exclude contains an empty namespace name")
            raw = entry.get("namespaceQuotas") or {}
            per_ns: dict[str, dict[str, int]] = {}
            if not isinstance(raw, Mapping):
                errors.append(f"{where}.namespaceQuotas: expected a map of namespace to caps, got {raw!r}")
                raw = {}
            for ns, caps in raw.items():
                if not str(ns).strip():
                    errors.append(f"{where}: namespaceQuotas contains an empty namespace key")
                    continue
                per_ns[str(ns)] = _check_caps(caps, f"{where}.namespaceQuotas[{ns!r}]", errors)
            out.append(QuotaLimiter(name, "namespace", namespace_quotas=per_ns, exclude=tuple(exclude)))
        else:
            errors.append(f"{where}: scope must be 'cluster' or 'namespace', got {scope!r}")
    if errors:
        raise QuotaError("; ".join(errors))
    return tuple(out)


@dataclass(slots=True)
class Proposal:
    """One variant's proposed target, as the limiter sees (and may lower) it."""

    namespace: str
    name: str
    accelerator: str
    gpus_per_replica: int
    current: int
    target: int
    min_replicas: int = 0
    cost: float = 10.0
    spare: float = 0.0
    priority: float = 1.0
    limited_by: str = ""


class _Budget:
    """What one limiter has left this cycle, by (namespace or "", accelerator)."""

    def __init__(self, limiter: QuotaLimiter, proposals: Sequence[Proposal]) -> None:
        self.limiter = limiter
        self._used: dict[tuple[str, str], int] = {}
        for p in proposals:
            scope_ns = "" if limiter.scope == "cluster" else p.namespace
            k = (scope_ns, p.accelerator)
            self._used[k] = self._used.get(k, 0) + p.current * max(1, p.gpus_per_replica)

    def grant(self, p: Proposal, requested: int) -> int:
        caps = self.limiter.caps(p.namespace)
        if caps is None:
            return requested  # excluded namespace
        cap = caps.get(p.accelerator, 0)
        if cap == UNLIMITED:
            return requested
        k = ("" if self.limiter.scope == "cluster" else p.namespace, p.accelerator)
        granted = max(0, min(requested, cap - self._used.get(k, 0)))
        self._used[k] = self._used.get(k, 0) + granted
        return granted


def _resolve_accelerators(limiters: Iterable[QuotaLimiter], proposals: Sequence[Proposal]) -> None:
    types: set[str] = set()
    for limiter in limiters:
        types |= limiter.known_types()
    if len(types) == 1:
        only = next(iter(types))
        for p in proposals:
            if p.accelerator in _UNRESOLVED:
                p.accelerator = only


def apply_limiters(limiters: Sequence[QuotaLimiter], proposals: Sequence[Proposal]) -> list[Proposal]:
    """Lower the scale-up proposals that exceed a quota (in place); returns those that were limited."""
    if not limiters:
        return []
    _resolve_accelerators(limiters, proposals)
    budgets = [_Budget(limiter, proposals) for limiter in limiters]
    ups = sorted(
        (p for p in proposals if p.target > p.current),
        key=lambda p: (-p.priority, p.spare, p.cost, p.namespace, p.name),
    )
    limited: list[Proposal] = []
    for p in ups:
        gpus = max(1, p.gpus_per_replica)
        wanted = p.target - p.current
        granted_replicas = wanted
        for budget in budgets:
            # an unresolved type fails closed: no per-type cap can be matched
            granted = 0 if p.accelerator in _UNRESOLVED else budget.grant(p, granted_replicas * gpus)
            replicas = math.floor(granted / gpus)
            if replicas < granted_replicas and not p.limited_by:
                p.limited_by = budget.limiter.name
            granted_replicas = replicas
        if granted_replicas < wanted:
            p.target = max(p.current + granted_replicas, p.min_replicas)
            limited.append(p)
    return limited
