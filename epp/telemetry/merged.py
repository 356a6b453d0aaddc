"""One ``/metrics`` for several processes: a registry's series with other processes' families added in.

``epp serve --workers`` (:mod:`epp.workers`) serves the parent's registry through
:class:`MergedRegistry`: each child sends the families of its request-path series sets
(``epp.picker_series.WORKER_SERIES``) every :data:`PUSH_INTERVAL` (:func:`families_of`), and
they add up across processes, as a request is counted by the one process that served it. When a
child ends, its counters and histograms stay in the sums (a replacement starts from zero: without
that the pod's totals would go down) and its gauges go.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import Metric
from prometheus_client.samples import Sample

__all__ = ["PUSH_INTERVAL", "Family", "MergedRegistry", "WorkerFamilies", "families_of"]

PUSH_INTERVAL = 1.0

SampleKey = tuple[str, tuple[tuple[str, str], ...]]
"""(sample name, sorted labels)."""
Family = tuple[str, str, str, list[tuple[str, tuple[tuple[str, str], ...], float]]]
"""(name, type, help, samples) of one family, as a child sends it."""

_ADDITIVE = frozenset({"counter", "histogram", "summary", "gaugehistogram"})


def families_of(registry: CollectorRegistry, names: frozenset[str]) -> list[Family]:
    """The families of ``registry`` named in ``names``, in the shape a child sends."""
    return [
        (
            m.name,
            m.type,
            m.documentation,
            [(s.name, tuple(sorted(s.labels.items())), s.value) for s in m.samples],
        )
        for m in registry.collect()
        if m.name in names
    ]


class WorkerFamilies:
    """The children's latest families, summed on demand; what ended children left, kept."""

    def __init__(self) -> None:
        self._live: dict[int, list[Family]] = {}
        self._retired: dict[str, dict[SampleKey, float]] = {}
        self._kinds: dict[str, tuple[str, str]] = {}
        self._totals: dict[str, dict[SampleKey, float]] = {}

    def update(self, worker: int, families: list[Family]) -> None:
        self._live[worker] = families

    def retire(self, worker: int) -> None:
        """``worker`` ended: its counters and histograms stay counted, its gauges go."""
        for name, kind, _, samples in self._live.pop(worker, ()):
            if kind in _ADDITIVE:
                into = self._retired.setdefault(name, {})
                for sample, labels, value in samples:
                    into[(sample, labels)] = into.get((sample, labels), 0.0) + value

    def freeze(self) -> None:
        """Sum what is known now, for the next :meth:`MergedRegistry.collect` (call on the loop, before it)."""
        totals: dict[str, dict[SampleKey, float]] = {name: dict(s) for name, s in self._retired.items()}
        for families in self._live.values():
            for name, kind, help_text, samples in families:
                self._kinds.setdefault(name, (kind, help_text))
                into = totals.setdefault(name, {})
                for sample, labels, value in samples:
                    into[(sample, labels)] = into.get((sample, labels), 0.0) + value
        self._totals = totals

    @property
    def totals(self) -> Mapping[str, Mapping[SampleKey, float]]:
        return self._totals

    def kind(self, name: str) -> tuple[str, str]:
        return self._kinds.get(name, ("untyped", ""))


class MergedRegistry(CollectorRegistry):
    """Collects ``registry`` with ``workers``' frozen totals added (see the module)."""

    def __init__(self, registry: CollectorRegistry, workers: WorkerFamilies) -> None:
        super().__init__(auto_describe=False)
        self._registry = registry
        self._workers = workers

    @property
    def registry(self) -> CollectorRegistry:
        """Itself: what the ``/metrics`` server serves (its ``HasRegistry``)."""
        return self

    def collect(self) -> Iterator[Metric]:
        extra = dict(self._workers.totals)
        for family in self._registry.collect():
            added = extra.pop(family.name, None)
            yield family if not added else _merged(family, added)
        for name, samples in extra.items():
            kind, help_text = self._workers.kind(name)
            family = Metric(name, help_text, kind)
            family.samples = [Sample(s, dict(labels), value) for (s, labels), value in samples.items()]
            yield family


def _merged(family: Metric, added: Mapping[SampleKey, float]) -> Metric:
    merged = Metric(family.name, family.documentation, family.type, family.unit)
    extra = dict(added)
    samples: list[Any] = []
    for s in family.samples:
        more = extra.pop((s.name, tuple(sorted(s.labels.items()))), None)
        samples.append(s if more is None else s._replace(value=s.value + more))
    samples.extend(_new_samples(extra))
    merged.samples = samples
    return merged


def _new_samples(extra: Mapping[SampleKey, float]) -> Iterable[Sample]:
    """Series only children have, each series' samples together (a histogram's buckets, count and sum)."""
    by_series: dict[tuple[tuple[str, str], ...], list[Sample]] = {}
    for (name, labels), value in extra.items():
        series = tuple(kv for kv in labels if kv[0] not in ("le", "quantile"))
        by_series.setdefault(series, []).append(Sample(name, dict(labels), value))
    for samples in by_series.values():
        yield from samples
