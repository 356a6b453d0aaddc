"""A stand-in for the Prometheus that HPAs (through prometheus-adapter) and KEDA read, for the fake cluster.

It scrapes ``/metrics`` pages (the autoscaler's, for ``wva_desired_replicas``) when asked to and
answers instant queries over the last scrape, with Prometheus's target-label rule: a target's
labels (``job``, ``namespace``, …) are added to every series, and a series label they collide with
is kept as ``exported_<name>`` (``honor_labels: false``, the ServiceMonitor default) — which is
why the HPA sample selects on ``exported_namespace``. With ``honor_labels`` the series' own labels
win.

Queries: an instant vector selector with equality matchers, optionally wrapped in ``sum(...)``:
``wva_desired_replicas{variant_name="x",exported_namespace="ns"}``, across lines as KEDA samples
write it. Anything else raises :class:`QueryError` naming the query: this is not a PromQL engine
and does not pretend to be one.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import aiohttp
from prometheus_client.parser import text_string_to_metric_families

__all__ = ["PrometheusStandIn", "QueryError", "ScrapeTarget"]

log = logging.getLogger(__name__)

_SELECTOR = re.compile(
    r"^\s*(?P<sum>sum\s*\(\s*)?(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)\s*(?:\{(?P<matchers>[^}]*)\})?\s*(?P<close>\))?\s*$",
    re.S,
)
_MATCHER = re.compile(r'^\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*$', re.S)


class QueryError(ValueError):
    """A query the stand-in cannot answer; the message quotes it."""


@dataclass(frozen=True, slots=True)
class ScrapeTarget:
    """One ``/metrics`` URL and the target labels Prometheus would attach to its series."""

    url: str
    labels: Mapping[str, str] = field(default_factory=dict)
    honor_labels: bool = False


Series = tuple[Mapping[str, str], float]


def _attach(target: ScrapeTarget, labels: Mapping[str, str]) -> dict[str, str]:
    out = dict(labels)
    for key, value in target.labels.items():
        if key in out and not target.honor_labels:
            out[f"exported_{key}"] = out.pop(key)
        if key not in out or not target.honor_labels:
            out[key] = value
    return out


def _matchers(text: str, query: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in (p for p in text.split(",") if p.strip()):
        m = _MATCHER.match(part)
        if m is None:
            raise QueryError(f'unsupported label matcher {part.strip()!r} in {query!r} (only label="value")')
        out[m.group(1)] = m.group(2).replace('\\"', '"').replace("\\\\", "\\")
    return out


class PrometheusStandIn:
    """Series from the last :meth:`scrape` of every target; :meth:`select` and :meth:`query` read them."""

    def __init__(
        self, session: aiohttp.ClientSession, targets: Sequence[ScrapeTarget] = (), *, timeout: float = 2.0
    ) -> None:
        self._session = session
        self.targets = list(targets)
        self._timeout = timeout
        self._series: dict[str, list[Series]] = {}

    async def _page(self, target: ScrapeTarget) -> str | None:
        try:
            async with asyncio.timeout(self._timeout), self._session.get(target.url) as resp:
                resp.raise_for_status()
                return await resp.text()
        except (aiohttp.ClientError, TimeoutError) as e:
            log.warning(
                "stand-in Prometheus: scrape failed", extra={"url": target.url, "error": str(e) or type(e).__name__}
            )
            return None

    async def scrape(self) -> None:
        """Replace the series with a fresh scrape of every target (a target that fails has none)."""
        pages = await asyncio.gather(*(self._page(t) for t in self.targets))
        series: dict[str, list[Series]] = {}
        for target, page in zip(self.targets, pages, strict=True):
            if page is None:
                continue
            for family in text_string_to_metric_families(page):
                for sample in family.samples:
                    series.setdefault(sample.name, []).append((_attach(target, sample.labels), float(sample.value)))
        self._series = series

    def select(self, name: str, matchers: Mapping[str, str]) -> list[Series]:
        """The series of ``name`` whose labels equal every matcher."""
        return [
            (labels, v)
            for labels, v in self._series.get(name, ())
            if all(labels.get(k) == m for k, m in matchers.items())
        ]

    def query(self, promql: str) -> float:
        """A scalar from a selector (one series, or none: 0) or ``sum(selector)``; else :class:`QueryError`."""
        m = _SELECTOR.match(promql)
        if m is None or bool(m.group("sum")) != bool(m.group("close")):
            raise QueryError(f'unsupported query {promql!r}: only name{{label="value",...}} or sum(...) of it')
        series = self.select(m.group("name"), _matchers(m.group("matchers") or "", promql))
        if m.group("sum"):
            return sum(v for _, v in series)
        if len(series) > 1:
            raise QueryError(f"query {promql!r} returned {len(series)} series; a scaler needs one")
        return series[0][1] if series else 0.0
