"""The metric-spec syntax engines are configured with: ``name`` or ``name{label=value,...}``.

Flags (``--total-queued-requests-metric``), ``core-metrics-extractor``'s ``engineConfigs`` and the
built-in engine maps all name a model-server metric this way; upstream parses the text as a
PromQL vector selector, auto-quoting bare values and keeping only ``=`` matchers, and so does
:func:`parse_selector`. It lives in the framework because both sides need it: the data-layer
plugins check their parameters with it when a config loads, and the scraper matches samples
with the :class:`MetricSelector` it returns.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["MetricSelector", "SelectorError", "parse_selector", "unescape_label_value"]

_UNESCAPE_RE = re.compile(r"\\(.)")
_UNESCAPES = {"n": "\n", "\\": "\\", '"': '"'}


def unescape_label_value(value: str) -> str:
    """A quoted label value's text with ``\\\\``, ``\\"`` and ``\\n`` resolved (the exposition format's escapes)."""
    return _UNESCAPE_RE.sub(lambda m: _UNESCAPES.get(m.group(1), "\\" + m.group(1)), value)


class SelectorError(ValueError):
    """A metric spec that is not ``name`` or ``name{label=value,...}``."""


@dataclass(frozen=True, slots=True)
class MetricSelector:
    """A sample name plus equality label matchers."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(labels.get(k) == v for k, v in self.labels)

    def __str__(self) -> str:
        if not self.labels:
            return self.name
        return self.name + "{" + ",".join(f'{k}="{v}"' for k, v in self.labels) + "}"


_SELECTOR_RE = re.compile(r"^\s*([a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(.*)\})?\s*$", re.S)
_MATCHER_RE = re.compile(
    r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*(?:"((?:[^"\\]|\\.)*)"|([^"=,{}!~\s]*))\s*$', re.S
)


def _split_matchers(body: str) -> list[str]:
    parts: list[str] = []
    start = 0
    quoted = False
    escaped = False
    for i, ch in enumerate(body):
        if escaped:
            escaped = False
        elif ch == "\\":
            escaped = True
        elif ch == '"':
            quoted = not quoted
        elif ch == "," and not quoted:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p for p in parts if p.strip()]


def parse_selector(text: str) -> MetricSelector:
    """Parse ``name`` or ``name{a=b,c="d"}``; keeps only ``=`` matchers, as upstream does."""
    m = _SELECTOR_RE.match(text)
    if m is None:
        raise SelectorError(f"cannot parse metric spec {text!r}: want name or name{{label=value,...}}")
    name, body = m.group(1), m.group(2)
    labels: list[tuple[str, str]] = []
    for term in _split_matchers(body or ""):
        mm = _MATCHER_RE.match(term)
        if mm is None:
            raise SelectorError(f"cannot parse label matcher {term.strip()!r} in metric spec {text!r}")
        key, op, quoted, bare = mm.groups()
        if op == "=":
            labels.append((key, unescape_label_value(quoted) if quoted is not None else bare))
    return MetricSelector(name, tuple(labels))
