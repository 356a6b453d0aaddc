"""Kubernetes label selectors: parsing (string and object forms) and matching. Pure.

Shared by the datastore (pool selectors), standalone mode (``--endpoint-selector``) and the fake
API server (``?labelSelector=``), so every part agrees on what a selector means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["Requirement", "Selector", "SelectorError", "parse_selector", "selector_from_object"]


class SelectorError(ValueError):
    """A selector that cannot be parsed; the message names the offending part."""


_SET_RE = re.compile(r"^\s*(!?)\s*([A-Za-z0-9_./-]+)\s*(?:(notin|in)\s*\(([^)]*)\))?\s*$")
_EQ_RE = re.compile(r"^\s*([A-Za-z0-9_./-]+)\s*(==|!=|=)\s*([A-Za-z0-9_.-]*)\s*$")
_KEY_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Requirement:
    """One term: ``key op values`` with op in =, !=, in, notin, exists, ! (does not exist)."""

    key: str
    op: str
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op in ("=", "==", "in"):
            return present and labels[self.key] in self.values
        if self.op in ("!=", "notin"):
            return not present or labels[self.key] not in self.values
        if self.op == "exists":
            return present
        return not present  # "!"


@dataclass(frozen=True, slots=True)
class Selector:
    """A conjunction of requirements; the empty selector matches everything."""

    requirements: tuple[Requirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements

    @classmethod
    def from_match_labels(cls, match_labels: Mapping[str, str]) -> Selector:
        return cls(tuple(Requirement(k, "=", frozenset({v})) for k, v in sorted(match_labels.items())))

    def __str__(self) -> str:
        parts: list[str] = []
        for r in self.requirements:
            vals = sorted(r.values)
            if r.op in ("=", "=="):
                parts.append(f"{r.key}={vals[0]}")
            elif r.op == "!=":
                parts.append(f"{r.key}!={vals[0]}")
            elif r.op in ("in", "notin"):
                parts.append(f"{r.key} {r.op} ({','.join(vals)})")
            elif r.op == "exists":
                parts.append(r.key)
            else:
                parts.append(f"!{r.key}")
        return ",".join(parts)


def _split_terms(text: str) -> Iterable[str]:
    depth = 0
    start = 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            yield text[start:i]
            start = i + 1
    yield text[start:]


def _check_key(key: str, term: str) -> str:
    if not _KEY_RE.match(key):
        raise SelectorError(f"invalid label key {key!r} in selector term {term!r}")
    return key


def parse_selector(text: str) -> Selector:
    """Parse the string form: ``a=b,c!=d,e in (x,y),f notin (z),g,!h``."""
    if not text.strip():
        return Selector()
    reqs: list[Requirement] = []
    for term in _split_terms(text):
        if not term.strip():
            raise SelectorError(f"empty term in selector {text!r}")
        eq = _EQ_RE.match(term)
        if eq:
            key, op, value = eq.groups()
            reqs.append(Requirement(_check_key(key, term), "=" if op == "==" else op, frozenset({value})))
            continue
        st = _SET_RE.match(term)
        if not st:
            raise SelectorError(f"cannot parse selector term {term!r}")
        bang, key, op, values = st.groups()
        _check_key(key, term)
        if op:
            if bang:
                raise SelectorError(f"cannot negate a set term {term!r}")
            vals = frozenset(v.strip() for v in values.split(",") if v.strip())
            reqs.append(Requirement(key, op, vals))
        else:
            reqs.append(Requirement(key, "!" if bang else "exists"))
    return Selector(tuple(reqs))


_EXPR_OPS = {"In": "in", "NotIn": "notin", "Exists": "exists", "DoesNotExist": "!"}


def selector_from_object(obj: Mapping[str, Any] | None) -> Selector:
    """Parse a ``LabelSelector`` object (matchLabels + matchExpressions) or a plain label map.

    InferencePool v1alpha2 uses a plain ``map[string]string``; v1 uses ``{matchLabels: ...}``.
    """
    if not obj:
        return Selector()
    if "matchLabels" not in obj and "matchExpressions" not in obj:
        if not all(isinstance(v, str) for v in obj.values()):
            raise SelectorError(f"selector labels must be strings: {dict(obj)!r}")
        return Selector.from_match_labels({str(k): str(v) for k, v in obj.items()})
    reqs: list[Requirement] = []
    match_labels = obj.get("matchLabels") or {}
    if not isinstance(match_labels, Mapping):
        raise SelectorError(f"matchLabels must be a map, got {match_labels!r}")
    reqs.extend(Selector.from_match_labels({str(k): str(v) for k, v in match_labels.items()}).requirements)
    for expr in obj.get("matchExpressions") or []:
        op = _EXPR_OPS.get(str(expr.get("operator")))
        if op is None:
            raise SelectorError(f"unknown matchExpressions operator {expr.get('operator')!r}")
        values = frozenset(str(v) for v in expr.get("values") or [])
        if op in ("in", "notin") and not values:
            raise SelectorError(f"operator {expr.get('operator')} needs values (key {expr.get('key')!r})")
        reqs.append(Requirement(str(expr.get("key")), op, values))
    return Selector(tuple(reqs))
