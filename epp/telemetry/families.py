"""A metric family under GIE's name, the llm-d router's, or both (``--metrics-naming``).

The llm-d router renamed the picker's series (``inference_objective_request_total`` became
``llm_d_epp_request_total``, label ``pod_name`` became ``endpoint_name``, ...), added labels to
the request series (``fairness_id``, ``priority``), and still emits each old series beside its
new twin. A :class:`Family` is one such concept: the one or two Prometheus metrics that carry it,
written through one call. Label values are given once, in the order of the llm-d label set (the
superset); each metric takes the values of the labels it declares, so the GIE request series
simply drop ``fairness_id``.

Children are resolved once per tuple of label values and kept in the one label-child cache
(:class:`~epp.telemetry.children.ChildCache`). Twins whose label values are the same (only the
names differ) share one set of numbers, so a write is one update; twins that differ (the llm-d
request series add ``fairness_id``) get two: the "tee" children below hold both and forward each
update to them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from prometheus_client import CollectorRegistry

from epp.telemetry.children import ChildCache
from epp.telemetry.series import Counter, Gauge, Histogram, Series

__all__ = [
    "CounterChild",
    "CounterFamily",
    "Families",
    "Family",
    "GaugeChild",
    "GaugeFamily",
    "HistogramChild",
    "HistogramFamily",
    "METRICS_NAMINGS",
    "MetricsNaming",
    "Names",
]

MetricsNaming = Literal["gie", "llm-d", "both"]
"""Whose names upstream's series are exported under (``--metrics-naming``)."""
METRICS_NAMINGS: tuple[MetricsNaming, ...] = ("gie", "llm-d", "both")


class _Tee:
    """The series (zero, one or two) that one update goes to."""

    __slots__ = ("_children",)

    def __init__(self, children: tuple[Any, ...]) -> None:
        self._children = children


class CounterChild(_Tee):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        for child in self._children:
            child.inc(amount)

    def mirror(self, total: float) -> None:
        """Take a count kept elsewhere (copied in before a scrape); a smaller one reads as a reset."""
        for child in self._children:
            child.mirror(total)


class GaugeChild(_Tee):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        for child in self._children:
            child.inc(amount)

    def dec(self, amount: float = 1.0) -> None:
        for child in self._children:
            child.dec(amount)

    def set(self, value: float) -> None:
        for child in self._children:
            child.set(value)


class HistogramChild(_Tee):
    __slots__ = ()

    def observe(self, value: float) -> None:
        for child in self._children:
            child.observe(value)


ChildT = TypeVar("ChildT", bound=_Tee)


class Family(Generic[ChildT]):
    """The metrics of one concept; ``labels(*values)`` takes values in the llm-d label order."""

    __slots__ = ("_child", "_metrics", "_cache")

    def __init__(self, child: type[ChildT], metrics: Sequence[tuple[Series[Any], tuple[int, ...]]]) -> None:
        self._child = child
        self._metrics = tuple(metrics)
        """Each metric with the positions (in the llm-d label order) of the values it takes."""
        self._cache: ChildCache[tuple[str, ...], ChildT] = ChildCache(self._resolve)

    def _resolve(self, values: tuple[str, ...]) -> ChildT:
        return self._child(
            tuple(metric.labels(*(values[i] for i in picks)) if picks else metric for metric, picks in self._metrics)
        )

    def labels(self, *values: str) -> ChildT:
        """The (cached) child for these label values."""
        return self._cache.get(values)

    def exact(self, *values: str) -> ChildT:
        """A child writing only the metrics that take every label: values a twin with fewer labels could
        not tell apart (a per-stage gauge whose GIE twin has no stage). Not cached: keep it."""
        every = tuple(range(len(values)))
        return self._child(tuple(metric.labels(*values) for metric, picks in self._metrics if picks == every))

    def remove_exact(self, *values: str) -> None:
        """Drop the series :meth:`exact` writes (a twin with fewer labels keeps its own)."""
        every = tuple(range(len(values)))
        for metric, picks in self._metrics:
            if picks == every:
                metric.remove(*values)

    def remove(self, *values: str) -> None:
        """Drop the series of these label values from every labelled metric (absent ones are ignored).

        For families whose metrics share a series between several value tuples (GIE's running
        requests have only ``model_name``) that shared series goes too: remove only where the
        label sets are the same under both names (the pool gauges).
        """
        self._cache.forget(values)
        for metric, picks in self._metrics:
            if picks:
                metric.remove(*(values[i] for i in picks))


class CounterFamily(Family[CounterChild]):
    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        """For a family without labels."""
        self.labels().inc(amount)


class GaugeFamily(Family[GaugeChild]):
    __slots__ = ()

    def set(self, value: float) -> None:
        """For a family without labels."""
        self.labels().set(value)


class HistogramFamily(Family[HistogramChild]):
    __slots__ = ()

    def observe(self, value: float) -> None:
        """For a family without labels."""
        self.labels().observe(value)


@dataclass(frozen=True)
class Names:
    """One family's names, HELP texts and labels under each naming.

    ``labels`` are the llm-d label names (the superset, and the order values are given in);
    ``gie_labels`` the GIE series' labels when they differ (a subset, with ``renamed`` mapping a
    GIE label name to its llm-d name). ``None`` for a name: no series under that naming.
    ``successor`` names the llm-d series that replaces the GIE one when another family writes it
    (the prefix index size: one sum here, a series per plugin there). ``alpha`` False: the HELP
    has no ``[ALPHA]`` prefix (the llm-d router's KV-event series are plain Prometheus ones).
    """

    gie: str | None
    llm_d: str | None
    gie_help: str
    llm_d_help: str = ""
    labels: tuple[str, ...] = ()
    gie_labels: tuple[str, ...] | None = None
    renamed: Mapping[str, str] = field(default_factory=dict)
    successor: str | None = None
    alpha: bool = True

    def gie_picks(self) -> tuple[int, ...]:
        labels = self.labels if self.gie_labels is None else self.gie_labels
        return tuple(self.labels.index(self.renamed.get(name, name)) for name in labels)


def _help(names: Names, text: str) -> str:
    return f"[ALPHA] {text}" if names.alpha else text


class Families:
    """Registers families on ``registry`` under ``naming``, with upstream's HELP conventions.

    Under ``both`` (what the llm-d router does) each GIE series' HELP says which series replaces
    it, ``[ALPHA] [Deprecated: Use llm_d_epp_…] …``; under ``gie`` it is GIE's HELP, verbatim.
    """

    def __init__(self, registry: CollectorRegistry, naming: MetricsNaming) -> None:
        if naming not in METRICS_NAMINGS:
            raise ValueError(f"metrics naming must be one of {list(METRICS_NAMINGS)}, got {naming!r}")
        self._registry = registry
        self._naming = naming

    @property
    def naming(self) -> MetricsNaming:
        """Whose names the families are registered under (a set with a twin of its own reads it)."""
        return self._naming

    def _metrics(self, kind: type[Series[Any]], names: Names, **kw: Any) -> list[tuple[Any, tuple[int, ...]]]:
        """The family's metric(s); a twin with the GIE series' very label values shares its numbers."""
        out: list[tuple[Any, tuple[int, ...]]] = []
        if names.gie is not None and self._naming in ("gie", "both"):
            help_text = names.gie_help
            successor = names.llm_d or names.successor
            if self._naming == "both" and successor is not None:
                help_text = f"[Deprecated: Use {successor}] {help_text}"
            labels = names.labels if names.gie_labels is None else names.gie_labels
            metric = kind(names.gie, _help(names, help_text), labels, registry=self._registry, **kw)
            out.append((metric, names.gie_picks()))
        if names.llm_d is not None and self._naming in ("llm-d", "both"):
            help_text = names.llm_d_help or names.gie_help
            every = tuple(range(len(names.labels)))
            twin = out[0][0] if out and out[0][1] == every else None
            metric = kind(
                names.llm_d, _help(names, help_text), names.labels, registry=self._registry, shares=twin, **kw
            )
            if twin is None:
                out.append((metric, every))
        return out

    def counter(self, names: Names) -> CounterFamily:
        return CounterFamily(CounterChild, self._metrics(Counter, names))

    def gauge(self, names: Names) -> GaugeFamily:
        return GaugeFamily(GaugeChild, self._metrics(Gauge, names))

    def histogram(self, names: Names, buckets: Sequence[float]) -> HistogramFamily:
        return HistogramFamily(HistogramChild, self._metrics(Histogram, names, buckets=buckets))
