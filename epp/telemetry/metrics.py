"""The process's metrics: a registry we own, the ``--metrics-naming``, and the series sets declared on it.

Telemetry is a leaf: it imports no area. Each area declares the series it writes next to its own
code, as a *series set*: a class whose constructor takes this object and registers its metrics
with the primitives here, :class:`~epp.telemetry.families.Families` (``metrics.families``) for
upstream's series, which come under GIE's names, the llm-d router's or both, and
:mod:`epp.telemetry.series` (``registry=metrics.registry``) for ours (``epp_*``), which have
one name. A component asks for its set with :meth:`EppMetrics.series`, which declares it on first
use and hands every later caller the same object, so any number of pools, pipelines and reloads
write the same series. The ``epp serve`` runtime declares every set of the picker at start, so
``/metrics`` lists each family (with its HELP) before anything has been counted, as upstream's does.

Series live on a registry the caller owns (one per process, or per test), never the global one,
so tests can run side by side and compare exact values.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from prometheus_client import CollectorRegistry

from epp.telemetry.families import Families, MetricsNaming

__all__ = ["EppMetrics"]

SeriesT = TypeVar("SeriesT")


class EppMetrics:
    """What components receive to write metrics: the registry, its families (under the naming) and the series sets."""

    def __init__(self, registry: CollectorRegistry | None = None, *, naming: MetricsNaming = "both") -> None:
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self.families = Families(self.registry, naming)
        self._sets: dict[object, object] = {}

    def series(self, declare: Callable[[EppMetrics], SeriesT]) -> SeriesT:
        """The series set ``declare`` (a series-set class) makes: declared on first use, the same object after."""
        found = self._sets.get(declare)
        if found is None:
            found = self._sets[declare] = declare(self)
        return cast(SeriesT, found)
