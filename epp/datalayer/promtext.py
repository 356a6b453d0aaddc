"""Prometheus text format → samples of only the metrics asked for; no I/O.

A vLLM ``/metrics`` page is 30–80 KB, mostly histogram buckets we never read, and we scrape each
endpoint every 50 ms. So instead of tokenising every line (what ``prometheus_client``'s parser
does) we look for each wanted sample name at line starts with ``bytes.find`` (a C scan) and parse
only those lines; the cost is about one scan per name plus a handful of short lines per page.
The search for a name stops at the end of its metric group (the next ``# HELP``/``# TYPE``
line): the format requires a metric's lines to form one group, and every exporter we scrape
(prometheus_client, prometheus-cpp, client_golang) writes them so.

Also here: :func:`select`, which picks the series a :class:`MetricSelector` means (the selector
syntax itself, ``name{label=value,...}``, is :mod:`epp.framework.metric_spec`'s, re-exported here).

Bad input never raises out of :func:`parse`: a line that does not parse becomes an error for its
metric name, and the samples of that name that did parse are still returned.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from epp.framework.metric_spec import MetricSelector, SelectorError, parse_selector, unescape_label_value

__all__ = ["MetricSelector", "ParseResult", "Sample", "SelectorError", "parse", "parse_selector", "select"]


class Sample(NamedTuple):
    """One series' value; ``timestamp_ms`` is the optional exposition timestamp."""

    labels: Mapping[str, str]
    value: float
    timestamp_ms: int | None = None


@dataclass(slots=True)
class ParseResult:
    """Samples per wanted name (absent names have no key) and one error text per broken name."""

    samples: dict[str, list[Sample]] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class _LineError(ValueError):
    pass


_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
# Label sets without backslashes (nearly all): validate the whole set, then pull the pairs out.
_PLAIN_PAIR = rf'{_NAME}[ \t]*=[ \t]*"[^"\\]*"'
_PLAIN_SET_RE = re.compile(rf"[ \t]*(?:{_PLAIN_PAIR}[ \t]*(?:,[ \t]*{_PLAIN_PAIR}[ \t]*)*,?[ \t]*)?")
_PLAIN_PAIRS_RE = re.compile(rf'({_NAME})[ \t]*=[ \t]*"([^"]*)"')
# With escapes (\\, \", \n), one pair at a time.
_ESCAPED_PAIR_RE = re.compile(rf'[ \t]*({_NAME})[ \t]*=[ \t]*"((?:[^"\\]|\\.)*)"[ \t]*(,?)[ \t]*')
_EMPTY_LABELS: Mapping[str, str] = MappingProxyType({})
_NAME_ENDS = (b"{", b" ", b"\t", b"\r", b"\n", b"")
_METADATA = (b"\n# HELP ", b"\n# TYPE ")


def _parse_labels(section: str) -> dict[str, str]:
    """Parse the text between ``{`` and ``}``."""
    if "\\" not in section:
        if _PLAIN_SET_RE.fullmatch(section) is None:
            raise _LineError(f"bad label set {{{section}}}")
        return dict(_PLAIN_PAIRS_RE.findall(section))
    labels: dict[str, str] = {}
    pos = 0
    while pos < len(section):
        m = _ESCAPED_PAIR_RE.match(section, pos)
        if m is None or (not m.group(3) and m.end() != len(section)):
            raise _LineError(f"bad label set {{{section}}}")
        labels[m.group(1)] = unescape_label_value(m.group(2))
        pos = m.end()
    return labels


def _parse_line(raw: bytes, name_len: int) -> Sample:
    """Parse one sample line whose metric name (``name_len`` bytes) is already matched."""
    after = raw.decode("utf-8", "replace")[name_len:].lstrip(" \t")
    labels: Mapping[str, str] = _EMPTY_LABELS
    if after.startswith("{"):
        # The last "}" closes the set: values and timestamps never contain one.
        close = after.rfind("}")
        if close < 0:
            raise _LineError("unterminated label set")
        labels = _parse_labels(after[1:close])
        after = after[close + 1 :]
    rest = after.split()
    if not rest or len(rest) > 2:
        raise _LineError("expected 'value [timestamp]' after the name and labels")
    try:
        value = float(rest[0])
        timestamp = int(rest[1]) if len(rest) == 2 else None
    except ValueError as e:
        raise _LineError(f"bad number: {e}") from None
    return Sample(labels, value, timestamp)


def _line_at(data: bytes, start: int) -> tuple[bytes, int]:
    end = data.find(b"\n", start)
    if end < 0:
        end = len(data)
    line = data[start:end]
    if line.endswith(b"\r"):
        line = line[:-1]
    return line, end


def _next_line_start(data: bytes, newline_name: bytes, start: int, end: int) -> int:
    hit = data.find(newline_name, start, end)
    return hit + 1 if hit >= 0 else -1


def _group_end(data: bytes, start: int) -> int:
    """Where the metric group holding ``start`` ends: the next HELP or TYPE line, else the page end.

    The text format puts all lines of a metric in one group, so the rest of the page need not
    be searched for more samples of it; other comment lines do not end a group.
    """
    pos = start
    while True:
        comment = data.find(b"\n#", pos)
        if comment < 0:
            return len(data)
        if data.startswith(_METADATA, comment):
            return comment
        pos = comment + 2


def _find_samples(data: bytes, name: str, result: ParseResult) -> None:
    needle = name.encode()
    at_line_start = b"\n" + needle
    n = len(needle)
    # Candidate lines start at offset 0 or after a newline. The byte after the name must end the
    # name; otherwise this is a longer name sharing the prefix (``x`` vs ``x_sum``). A name ending
    # its line is a sample without a value: parsed, so it is reported as broken.
    pos = 0 if data.startswith(needle) else _next_line_start(data, at_line_start, 0, len(data))
    if pos < 0:
        return
    end = _group_end(data, pos)
    samples: list[Sample] = []
    while pos >= 0:
        search_from = pos + n
        if data[pos + n : pos + n + 1] in _NAME_ENDS:
            line, search_from = _line_at(data, pos)
            try:
                samples.append(_parse_line(line, n))
            except _LineError as e:
                result.errors.setdefault(name, f"{name}: {e} in line {line[:200]!r}")
        pos = _next_line_start(data, at_line_start, search_from, end)
    if samples:
        result.samples[name] = samples


def parse(data: bytes | str, names: Iterable[str]) -> ParseResult:
    """Samples of each of ``names`` (exact sample names, e.g. ``x_total``/``x_bucket``) in ``data``."""
    raw = data.encode() if isinstance(data, str) else data
    result = ParseResult()
    for name in names:
        _find_samples(raw, name, result)
    return result


def select(samples: Sequence[Sample] | None, selector: MetricSelector) -> Sample | None:
    """The matching series with the latest timestamp; without timestamps, the last one listed."""
    best: Sample | None = None
    for s in samples or ():
        if not selector.matches(s.labels):
            continue
        if best is None or (s.timestamp_ms or 0) >= (best.timestamp_ms or 0):
            best = s
    return best
