"""Counters, gauges and histograms for the request path: plain numbers updated without a lock.

``prometheus_client``'s metrics take a mutex on every update and check observability on every
call; a request updates a few dozen series (its counters, sizes, durations, the per-phase and
per-plugin timings, the llm-d twins), and that bookkeeping was about a quarter of the picker's
own CPU per request. Every update here happens on the event loop, and so does every scrape
(the ``/metrics`` server runs on the same loop), so no lock is needed: an update is an attribute
increment, a histogram observation one ``bisect`` and two increments.

A renamed twin (the llm-d router's name for a GIE series with the same labels) *shares* the
first metric's series (``shares=``): one update, two names on ``/metrics``.

The classes keep ``prometheus_client``'s interface where the picker uses it (``labels``,
``remove``, ``inc``/``dec``/``set``/``observe``, an unlabelled metric updated directly) and its
exposition: each metric registers itself as a collector on the given registry and renders
through ``prometheus_client``'s own families, so names, ``_total``, buckets (``le`` spelled as
Go spells floats) and HELP come out byte for byte as before. Only use them from the loop thread.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Generic, TypeVar

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

__all__ = ["Counter", "CounterValue", "Gauge", "GaugeValue", "Histogram", "HistogramValue", "Series"]

_INF = float("inf")


class CounterValue:
    """One counter series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError(f"counters only go up; got an increment of {amount}")
        self.value += amount

    def mirror(self, total: float) -> None:
        """Take a count kept elsewhere (copied in before a scrape); a smaller one reads as a reset."""
        self.value = float(total)


class GaugeValue:
    """One gauge series."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        self.value -= amount

    def set(self, value: float) -> None:
        self.value = float(value)


class HistogramValue:
    """One histogram series: a count per bucket (not cumulative; summed when rendered) and the sum."""

    __slots__ = ("_bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self._bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self._bounds, value)] += 1
        self.sum += value

    def add(self, counts: Sequence[int], total: float) -> None:
        """Fold in observations made elsewhere (per-bucket counts over the same bounds, and their sum)."""
        if len(counts) != len(self.counts):
            raise ValueError(f"{len(counts)} bucket counts for a histogram of {len(self.counts)}")
        for i, n in enumerate(counts):
            self.counts[i] += n
        self.sum += total


ValueT = TypeVar("ValueT", CounterValue, GaugeValue, HistogramValue)
ScalarT = TypeVar("ScalarT", CounterValue, GaugeValue)


class Series(Collector, Generic[ValueT]):
    """A metric: its series by label values, registered on ``registry`` as its own collector."""

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
        shares: Series[ValueT] | None = None,
    ) -> None:
        self._name = name
        self._documentation = documentation
        self._labelnames = tuple(labelnames)
        if shares is None:
            self._series: dict[tuple[str, ...], ValueT] = {}
            self._unlabelled: ValueT | None = None if self._labelnames else self._new()
        else:  # the same numbers under a second name (a renamed twin): one update serves both
            if len(shares._labelnames) != len(self._labelnames):
                raise ValueError(f"{name} cannot share {shares._name}'s series: their label counts differ")
            self._series = shares._series
            self._unlabelled = shares._unlabelled
        registry.register(self)

    def _new(self) -> ValueT:
        raise NotImplementedError

    def labels(self, *values: str, **by_name: str) -> ValueT:
        """The series of these label values, given in order or by name (made on first use)."""
        if by_name:
            values = tuple(by_name[name] for name in self._labelnames)
        series = self._series.get(values)
        if series is None:
            if len(values) != len(self._labelnames):
                raise ValueError(f"{self._name} takes labels {self._labelnames}, got {values}")
            series = self._series[values] = self._new()
        return series

    def remove(self, *values: str) -> None:
        self._series.pop(values, None)

    def items(self) -> list[tuple[tuple[str, ...], ValueT]]:
        """Every series with its label values (``()`` for an unlabelled metric), as of now."""
        return list(self._all())

    def clear(self) -> None:
        """Drop every labelled series (a set of labels that is replaced as a whole)."""
        self._series.clear()

    def _only(self) -> ValueT:
        if self._unlabelled is None:
            raise ValueError(f"{self._name} has labels {self._labelnames}: use labels(...)")
        return self._unlabelled

    def _all(self) -> Iterator[tuple[tuple[str, ...], ValueT]]:
        if self._unlabelled is not None:
            yield (), self._unlabelled
        yield from list(self._series.items())  # a copy: a config load may add series meanwhile

    def describe(self) -> list[Metric]:
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError

    def collect(self) -> list[Metric]:
        raise NotImplementedError


class _ScalarSeries(Series[ScalarT]):
    """A metric whose every series is one number (counters and gauges)."""

    def _family(self) -> CounterMetricFamily | GaugeMetricFamily:
        raise NotImplementedError

    def collect(self) -> list[Metric]:
        family = self._family()
        for values, series in self._all():
            family.add_metric(values, series.value)
        return [family]


class Counter(_ScalarSeries[CounterValue]):
    def _new(self) -> CounterValue:
        return CounterValue()

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def mirror(self, total: float) -> None:
        self._only().mirror(total)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self._name, self._documentation, labels=self._labelnames)


class Gauge(_ScalarSeries[GaugeValue]):
    def _new(self) -> GaugeValue:
        return GaugeValue()

    def inc(self, amount: float = 1.0) -> None:
        self._only().inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        self._only().dec(amount)

    def set(self, value: float) -> None:
        self._only().set(value)

    def _family(self) -> GaugeMetricFamily:
        return GaugeMetricFamily(self._name, self._documentation, labels=self._labelnames)


class Histogram(Series[HistogramValue]):
    _bounds: tuple[float, ...]

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str] = (),
        *,
        registry: CollectorRegistry,
        buckets: Sequence[float],
        shares: Histogram | None = None,
    ) -> None:
        bounds = tuple(sorted(float(b) for b in buckets if b != _INF))
        if not bounds:
            raise ValueError(f"{name}: a histogram needs at least one finite bucket")
        if shares is not None and shares._bounds != bounds:
            raise ValueError(f"{name} cannot share {shares._name}'s series: their buckets differ")
        self._bounds = bounds
        self._les = (*(str(floatToGoString(b)) for b in bounds), "+Inf")  # type: ignore[no-untyped-call]
        super().__init__(name, documentation, labelnames, registry=registry, shares=shares)

    def _new(self) -> HistogramValue:
        return HistogramValue(self._bounds)

    def observe(self, value: float) -> None:
        self._only().observe(value)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self._name, self._documentation, labels=self._labelnames)

    def collect(self) -> list[Metric]:
        family = self._family()
        for values, series in self._all():
            cumulative = 0
            buckets = []
            for le, count in zip(self._les, series.counts, strict=True):
                cumulative += count
                buckets.append((le, cumulative))
            family.add_metric(list(values), buckets, series.sum)
        return [family]
