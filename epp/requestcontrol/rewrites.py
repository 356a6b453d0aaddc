"""Model-name rewriting: InferenceModelRewrite precedence and weighted target draws.

Precedence (upstream ``modelrewritestore.go``): for the client's model, the oldest rule that
names it exactly; else the oldest generic rule (one with no ``matches``); objects are ordered
by creation time (the datastore returns them oldest first) and rules by their position. The
lookup index is rebuilt only when the datastore's rewrite tuple changes, so a request pays one
identity check. The same weighted draw serves InferenceModel ``targetModels`` (v1alpha2 pools).
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from epp.datastore.types import RewriteRule, RewriteSpec, TargetModel

__all__ = ["ModelRewriter", "RewriteIndex", "weighted_target"]


def weighted_target(targets: Sequence[TargetModel], rng: random.Random) -> str:
    """Draw a target name: P ∝ weight; if every weight is unset or zero, uniformly."""
    total = 0
    for t in targets:
        total += t.weight or 0
    if total <= 0:
        return rng.choice(targets).name
    draw = rng.randrange(total)
    running = 0
    for t in targets:
        running += t.weight or 0
        if draw < running:
            return t.name
    return targets[-1].name  # unreachable: draw < total


@dataclass(frozen=True, slots=True)
class RewriteIndex:
    """model name → (rewrite object name, rule) for exact rules; plus the oldest generic rule."""

    exact: Mapping[str, tuple[str, RewriteRule]] = field(default_factory=dict)
    generic: tuple[str, RewriteRule] | None = None

    @classmethod
    def build(cls, rewrites: Sequence[RewriteSpec]) -> RewriteIndex:
        exact: dict[str, tuple[str, RewriteRule]] = {}
        generic: tuple[str, RewriteRule] | None = None
        for spec in sorted(rewrites, key=lambda r: r.created):  # stable: keeps the store's tie order
            for rule in spec.rules:
                if not rule.targets:
                    continue
                if rule.matches:
                    for model in rule.matches:
                        exact.setdefault(model, (spec.name, rule))
                elif generic is None:
                    generic = (spec.name, rule)
        return cls(exact, generic)

    def rule_for(self, model: str) -> tuple[str, RewriteRule] | None:
        return self.exact.get(model) or self.generic


class ModelRewriter:
    """Applies InferenceModelRewrite rules; one per pool (its index follows the datastore's rules)."""

    __slots__ = ("_index", "_rng", "_source")

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._source: tuple[RewriteSpec, ...] = ()
        self._index = RewriteIndex()

    def rewrite(self, model: str, rewrites: Sequence[RewriteSpec]) -> tuple[str, str] | None:
        """(the rewrite object's name, the target drawn) for ``model``, or None when no rule applies."""
        if not rewrites:
            return None
        source = tuple(rewrites)  # the same object when the store hands out its tuple
        if source is not self._source and source != self._source:
            self._index = RewriteIndex.build(source)
        self._source = source
        found = self._index.rule_for(model)
        if found is None:
            return None
        rewrite_name, rule = found
        return rewrite_name, weighted_target(rule.targets, self._rng)
