"""Prometheus text format → samples of only the metrics asked for; no I/O.

A vLLM ``/metrics`` page is 30–80 KB, mostly histogram buckets we never read, and we scrape each
endpoint every 50 ms. So instead of tokenising every line (what ``prometheus_client``'s parser
does) we look for each wanted sample name at line starts with ``bytes.find`` (a C scan) and parse
only those lines; the cost is about one scan per name plus a handful of short lines per page.
The search for a name stops at the end of its metric group (the next ``# HELP``/``# TYPE``
line): the format requires a metric's lines to form one group, and every exporter we scrape
(prometheus_client, prometheus-cpp, client_golang) writes them so.

Pages of one server keep their layout from scrape to scrape, so a caller that scrapes the same
server again passes a :class:`PageMemo`: it remembers where each name's group started (the next
search starts just before, and is trusted only when the line above the hit is that name's own
``# TYPE``/``# HELP`` line, else the page is searched from the top) and the label sets already
parsed (a series keeps its labels while its value moves). At 100–500 endpoints every 50 ms this
halves the parse; without a memo the result is the same.

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

__all__ = ["MetricSelector", "PageMemo", "ParseResult", "Sample", "SelectorError", "parse", "parse_selector", "select"]


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


_MEMO_LABEL_SETS = 512  # a server's series are tens; a page that churns label sets is re-parsed, not hoarded
_HINT_SLACK = 2048  # how far a group may move up between two pages (values changing length above it)


class PageMemo:
    """What :func:`parse` learnt from one server's last page: group offsets and parsed label sets.

    Owned by one caller (one endpoint's scraper); bounded: at most one offset per wanted name and
    :data:`_MEMO_LABEL_SETS` label sets, forgotten all at once when full.
    """

    __slots__ = ("labels", "offsets")

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.labels: dict[str, Mapping[str, str]] = {}

    def parsed_labels(self, section: str) -> Mapping[str, str]:
        known = self.labels.get(section)
        if known is None:
            if len(self.labels) >= _MEMO_LABEL_SETS:
                self.labels.clear()
            known = self.labels[section] = MappingProxyType(_parse_labels(section))
        return known


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
_METADATA_LINES = (b"# HELP ", b"# TYPE ")


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


def _parse_line(raw: bytes, name_len: int, memo: PageMemo | None) -> Sample:
    """Parse one sample line whose metric name (``name_len`` bytes) is already matched."""
    after = raw.decode("utf-8", "replace")[name_len:].lstrip(" \t")
    labels: Mapping[str, str] = _EMPTY_LABELS
    if after.startswith("{"):
        # The last "}" closes the set: values and timestamps never contain one.
        close = after.rfind("}")
        if close < 0:
            raise _LineError("unterminated label set")
        section = after[1:close]
        labels = memo.parsed_labels(section) if memo is not None else _parse_labels(section)
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


def _first_line(data: bytes, needle: bytes, start: int) -> int:
    """Offset of the first line at or after ``start`` holding a sample named exactly ``needle``; -1 if none.

    A line starting with a longer name that shares the prefix (``x_total`` for ``x``) is passed
    over, so the group searched afterwards is ``needle``'s own.
    """
    at_line_start = b"\n" + needle
    n = len(needle)
    pos = 0 if start == 0 and data.startswith(needle) else _next_line_start(data, at_line_start, start, len(data))
    while pos >= 0 and data[pos + n : pos + n + 1] not in _NAME_ENDS:
        pos = _next_line_start(data, at_line_start, pos + n, len(data))
    return pos


def _opens_group(data: bytes, pos: int, needle: bytes) -> bool:
    """Whether the line above ``pos`` is ``needle``'s ``# TYPE`` or ``# HELP`` line (so ``pos`` opens its group)."""
    if pos < 2:
        return False
    above = data[data.rfind(b"\n", 0, pos - 1) + 1 : pos - 1]
    if not above.startswith(_METADATA_LINES):
        return False
    rest = above[7:]
    return rest.startswith(needle) and rest[len(needle) : len(needle) + 1] in (b" ", b"\r", b"")


def _group_start(data: bytes, needle: bytes, name: str, memo: PageMemo | None) -> int:
    """Where ``name``'s samples begin: near the memo's offset when its header is right above, else searched."""
    if memo is not None:
        hint = memo.offsets.get(name)
        if hint is not None:
            pos = _first_line(data, needle, max(0, hint - _HINT_SLACK))
            if pos >= 0 and _opens_group(data, pos, needle):
                memo.offsets[name] = pos
                return pos
    pos = _first_line(data, needle, 0)
    if memo is not None:
        if pos >= 0 and _opens_group(data, pos, needle):
            memo.offsets[name] = pos
        else:  # no header to check a later hint against (histogram samples, bare pages): always search
            memo.offsets.pop(name, None)
    return pos


def _find_samples(data: bytes, name: str, result: ParseResult, memo: PageMemo | None) -> None:
    needle = name.encode()
    at_line_start = b"\n" + needle
    n = len(needle)
    # Candidate lines start at offset 0 or after a newline. The byte after the name must end the
    # name; otherwise this is a longer name sharing the prefix (``x`` vs ``x_sum``). A name ending
    # its line is a sample without a value: parsed, so it is reported as broken.
    pos = _group_start(data, needle, name, memo)
    if pos < 0:
        return
    end = _group_end(data, pos)
    samples: list[Sample] = []
    while pos >= 0:
        search_from = pos + n
        if data[pos + n : pos + n + 1] in _NAME_ENDS:
            line, search_from = _line_at(data, pos)
            try:
                samples.append(_parse_line(line, n, memo))
            except _LineError as e:
                result.errors.setdefault(name, f"{name}: {e} in line {line[:200]!r}")
        pos = _next_line_start(data, at_line_start, search_from, end)
    if samples:
        result.samples[name] = samples


def parse(data: bytes | str, names: Iterable[str], memo: PageMemo | None = None) -> ParseResult:
    """Samples of each of ``names`` (exact sample names, e.g. ``x_total``/``x_bucket``) in ``data``.

    ``memo``: what an earlier parse of the same server's page learnt (updated here); the result
    does not depend on it.
    """
    raw = data.encode() if isinstance(data, str) else data
    result = ParseResult()
    for name in names:
        _find_samples(raw, name, result, memo)
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
