"""Prometheus text exposition (format 0.0.4) as ``prometheus_client`` writes it, without its registry.

The simulator must produce byte-for-byte what a vLLM server's ``prometheus_client`` does (label
names sorted, values printed as Go prints floats, ``_created`` gauges after every counter and
histogram, histograms as buckets then ``_count`` then ``_sum``), yet render fast enough for the
picker's 50 ms scrapes. So the families here build their label strings and headers once, and a
histogram series keeps its text until its next observation. What is exposed, under which names,
is the catalogue's business (``vllm_metrics``, ``default_families``), not this module's.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Mapping, Sequence

__all__ = [
    "CONTENT_TYPE",
    "CounterFamily",
    "HistogramFamily",
    "HistogramSeries",
    "SummaryFamily",
    "family_header",
    "gauge",
    "labels_text",
    "value_text",
]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def labels_text(pairs: Mapping[str, str]) -> str:
    """``{a="x",b="y"}`` with names sorted, or ``""`` for no labels."""
    if not pairs:
        return ""
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs.items())) + "}"


def value_text(value: float) -> str:
    """A sample value as Go (and ``prometheus_client``) prints it: ``1.0``, ``+Inf``, ``1.7e+09``."""
    d = float(value)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:  # Go switches to an exponent sooner than Python
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+0{dot - 1}"
    return s


def family_header(name: str, help_text: str, kind: str) -> str:
    """The ``# HELP`` and ``# TYPE`` lines of a family."""
    return f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n"


def gauge(out: list[str], name: str, help_text: str, key: str, value: float) -> None:
    """A one-series gauge family; ``key`` is the series' :func:`labels_text`."""
    out.append(f"{family_header(name, help_text, 'gauge')}{name}{key} {value_text(value)}\n")


class CounterFamily:
    """A counter family: ``name_total`` series, then the ``name_created`` gauge family."""

    __slots__ = ("_created", "_created_header", "_header", "_name", "_values")

    def __init__(self, name: str, help_text: str) -> None:
        self._header = family_header(f"{name}_total", help_text, "counter")
        self._created_header = family_header(f"{name}_created", help_text, "gauge")
        self._values: dict[str, float] = {}
        self._created: dict[str, str] = {}
        self._name = name

    def series(self, labels: Mapping[str, str], created: float) -> str:
        """The key of the series with ``labels``, created at 0 (stamped ``created``) if new."""
        key = labels_text(labels)
        if key not in self._values:
            self._values[key] = 0.0
            self._created[key] = value_text(created)
        return key

    def inc(self, key: str, amount: float = 1.0) -> None:
        self._values[key] += amount

    def value(self, key: str) -> float:
        return self._values[key]

    def render(self, out: list[str]) -> None:
        out.append(self._header)
        name = self._name
        out.extend(f"{name}_total{key} {value_text(v)}\n" for key, v in self._values.items())
        out.append(self._created_header)
        out.extend(f"{name}_created{key} {c}\n" for key, c in self._created.items())


class HistogramSeries:
    """One labelled series of a histogram: bucket counts, count and sum, and its cached text."""

    __slots__ = ("bounds", "counts", "count", "sum", "created", "bucket_keys", "key", "cache")

    def __init__(self, name: str, bounds: Sequence[float], labels: Mapping[str, str], created: float) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.count = 0
        self.sum = 0.0
        self.created = value_text(created)
        self.key = labels_text(labels)
        les = [*(value_text(b) for b in bounds), "+Inf"]
        self.bucket_keys = [f"{name}_bucket{labels_text({**labels, 'le': le})} " for le in les]
        self.cache: str | None = None

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.count += 1
        self.sum += value
        self.cache = None


class HistogramFamily:
    """A histogram family; each series caches its text until the next observation."""

    def __init__(self, name: str, help_text: str, bounds: Sequence[float]) -> None:
        self.name = name
        self.bounds = tuple(float(b) for b in bounds)
        self._header = family_header(name, help_text, "histogram")
        self._created_header = family_header(f"{name}_created", help_text, "gauge")
        self._series: dict[str, HistogramSeries] = {}

    def series(self, labels: Mapping[str, str], created: float) -> HistogramSeries:
        """The series with ``labels``, created empty (stamped ``created``) if new."""
        key = labels_text(labels)
        found = self._series.get(key)
        if found is None:
            found = self._series[key] = HistogramSeries(self.name, self.bounds, labels, created)
        return found

    def render(self, out: list[str]) -> None:
        out.append(self._header)
        name = self.name
        for s in self._series.values():
            if s.cache is None:
                lines = []
                cumulative = 0
                for key, n in zip(s.bucket_keys, s.counts, strict=True):
                    cumulative += n
                    lines.append(f"{key}{cumulative}.0\n")
                lines.append(f"{name}_count{s.key} {s.count}.0\n{name}_sum{s.key} {value_text(s.sum)}\n")
                s.cache = "".join(lines)
            out.append(s.cache)
        out.append(self._created_header)
        out.extend(f"{name}_created{s.key} {s.created}\n" for s in self._series.values())


class SummaryFamily:
    """A summary family without quantiles (count and sum), as the HTTP instrumentator writes."""

    def __init__(self, name: str, help_text: str) -> None:
        self.name = name
        self._header = family_header(name, help_text, "summary")
        self._created_header = family_header(f"{name}_created", help_text, "gauge")
        self._series: dict[str, list[float]] = {}  # key → [count, sum, created]

    def observe(self, labels: Mapping[str, str], value: float, now_wall: float) -> None:
        key = labels_text(labels)
        s = self._series.get(key)
        if s is None:
            s = self._series[key] = [0.0, 0.0, now_wall]
        s[0] += 1
        s[1] += value

    def render(self, out: list[str]) -> None:
        out.append(self._header)
        name = self.name
        for key, (count, total, _) in self._series.items():
            out.append(f"{name}_count{key} {value_text(count)}\n{name}_sum{key} {value_text(total)}\n")
        out.append(self._created_header)
        out.extend(f"{name}_created{key} {value_text(s[2])}\n" for key, s in self._series.items())
