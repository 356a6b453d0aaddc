"""Samples → :class:`MetricsSnapshot` with an engine's map, and GIE's metric-name flags on that map.

The maps themselves (built-in engines, the table ``core-metrics-extractor`` configures) are
:mod:`epp.framework.engine_metrics`'s; :func:`engine_spec` looks up a built-in one by name.

Partial results are applied: each field that parsed replaces the previous value, the others keep
it, and the problems are returned so the scraper can count and log them. An engine's custom
metrics (``customMetrics`` in ``engineConfigs``) land in ``MetricsSnapshot.custom`` by their
attribute key, each keeping its last value when a page lacks it. A new snapshot also records the
time since the one it replaces (``scrape_interval``: the interval the scraper achieved).

GIE's metric-name flags (``--total-queued-requests-metric`` and friends, which its chart sets for
SGLang, Triton and trtllm-serve) override a field of an engine's map (:func:`with_overrides`):
``name`` or ``name{label=value,...}`` replaces the engine's metric, an empty value turns the field
off (it is then neither read nor reported missing), as GIE does. Which engines they apply to is
the scrape spec's business (``epp.datalayer.scrape_spec``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from epp.datalayer.promtext import MetricSelector, PageMemo, ParseResult, Sample, parse, parse_selector, select
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.engine_metrics import DEFAULT_ENGINE, ENGINES, CacheInfoSpec, EngineSpec

__all__ = [
    "DEFAULT_ENGINE",
    "ENGINES",
    "CacheInfoSpec",
    "EngineSpec",
    "Extraction",
    "MetricNameFlags",
    "engine_spec",
    "extract",
    "read",
    "with_overrides",
]

# vllm:lora_requests_info labels (its value is the time the adapter set was last seen).
_LORA_RUNNING = "running_lora_adapters"
_LORA_WAITING = "waiting_lora_adapters"
_LORA_MAX = "max_lora"


def engine_spec(engine: str) -> EngineSpec:
    """The spec for an engine-type label value; unknown or empty → vLLM (upstream default)."""
    return ENGINES.get(engine) or ENGINES[DEFAULT_ENGINE]


class MetricNameFlags(Protocol):
    """GIE's metric-name flags (``ModelServerMetricsOptions``): None keeps the engine's, "" turns off."""

    @property
    def queued_requests_metric(self) -> str | None: ...
    @property
    def running_requests_metric(self) -> str | None: ...
    @property
    def kv_cache_usage_metric(self) -> str | None: ...
    @property
    def lora_info_metric(self) -> str | None: ...
    @property
    def cache_info_metric(self) -> str | None: ...


# GIE reads these labels of any cache-info metric; a metric a built-in engine declares keeps its own.
_GIE_CACHE_LABELS = ("block_size", "num_gpu_blocks")


def _choices(spec: str) -> tuple[MetricSelector, ...]:
    return (parse_selector(spec),) if spec else ()


def _cache_info(spec: str) -> CacheInfoSpec:
    selector = parse_selector(spec)
    for engine in ENGINES.values():
        if engine.cache_info is not None and engine.cache_info.selector.name == selector.name:
            return dataclasses.replace(engine.cache_info, selector=selector)
    return CacheInfoSpec(selector, *_GIE_CACHE_LABELS)


def with_overrides(spec: EngineSpec, flags: MetricNameFlags) -> EngineSpec:
    """``spec`` with every field the flags set replaced (or, for "", turned off); raises SelectorError."""
    changes: dict[str, Any] = {}
    for attr, value in (
        ("queued", flags.queued_requests_metric),
        ("running", flags.running_requests_metric),
        ("kv_usage", flags.kv_cache_usage_metric),
    ):
        if value is not None:
            changes[attr] = _choices(value)
    if flags.lora_info_metric is not None:
        changes["lora"] = parse_selector(flags.lora_info_metric) if flags.lora_info_metric else None
    if flags.cache_info_metric is not None:  # the one metric the cache configuration comes from
        changes.update(block_size=(), num_blocks=(), cache_info=None)
        if flags.cache_info_metric:
            changes["cache_info"] = _cache_info(flags.cache_info_metric)
    return dataclasses.replace(spec, **changes) if changes else spec


class Extraction(NamedTuple):
    """The new snapshot, whether any field was read (else it is ``previous``), and problems."""

    snapshot: MetricsSnapshot
    updated: bool
    errors: tuple[str, ...]


def read(
    data: bytes,
    engine: EngineSpec,
    *,
    previous: MetricsSnapshot | None = None,
    updated_at: float = 0.0,
    memo: PageMemo | None = None,
) -> Extraction:
    """Parse a ``/metrics`` page and extract ``engine``'s fields (see :func:`extract`).

    Later choices (vLLM's old KV-usage name) cost a scan of the page each, so they are looked
    for only when the first choice is absent. ``memo``: the same server's (see :class:`PageMemo`).
    """
    result = parse(data, engine.names, memo)
    for first, later in engine.fallbacks:
        if first not in result.samples:
            extra = parse(data, later, memo)
            result.samples.update(extra.samples)
            result.errors.update(extra.errors)
    return extract(result, engine, previous=previous, updated_at=updated_at)


def _value(result: ParseResult, selectors: Sequence[MetricSelector]) -> Sample | None:
    for selector in selectors:
        sample = select(result.samples.get(selector.name), selector)
        if sample is not None:
            return sample
    return None


def _finite(sample: Sample, errors: list[str]) -> float | None:
    if math.isfinite(sample.value):
        return sample.value
    errors.append(f"{sample.value} is not a finite number (labels {dict(sample.labels)})")
    return None


def _adapters(text: str) -> frozenset[str]:
    return frozenset(a for a in (part.strip() for part in text.split(",")) if a)


def _lora_series(samples: Sequence[Sample]) -> Sample:
    """The newest series that names adapters, else the newest: when the server goes idle, vLLM's
    newest series is empty, and the adapters last used are still the best guess of what is loaded
    (upstream ``getLatestLoraMetric`` skips empty series the same way)."""
    newest = max(samples, key=lambda s: s.value)
    named = [s for s in samples if s.labels.get(_LORA_RUNNING) or s.labels.get(_LORA_WAITING)]
    return max(named, key=lambda s: s.value) if named else newest


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    raw = labels.get(key, "")
    try:
        return int(float(raw))
    except ValueError:
        return None  # e.g. num_gpu_blocks="None" before the engine has profiled memory


def extract(
    result: ParseResult,
    engine: EngineSpec,
    *,
    previous: MetricsSnapshot | None = None,
    updated_at: float = 0.0,
) -> Extraction:
    """Read ``engine``'s fields from parsed samples into a snapshot built on ``previous``."""
    base = previous if previous is not None else MetricsSnapshot()
    errors = [result.errors[name] for name in sorted(result.errors)]
    fields: dict[str, Any] = {}

    for attr, selectors in (
        ("waiting_queue", engine.queued),
        ("running", engine.running),
        ("kv_cache_usage", engine.kv_usage),
    ):
        if not selectors:  # turned off by its metric-name flag
            continue
        sample = _value(result, selectors)
        if sample is None:
            errors.append(f"{attr}: none of {', '.join(map(str, selectors))} found")
        elif (v := _finite(sample, errors)) is not None:
            fields[attr] = max(0.0, v) if attr == "kv_cache_usage" else max(0, int(v))

    if engine.lora is not None:
        lora = [s for s in result.samples.get(engine.lora.name, ()) if engine.lora.matches(s.labels)]
        if lora:
            chosen = _lora_series(lora)
            fields["active_adapters"] = _adapters(chosen.labels.get(_LORA_RUNNING, ""))
            fields["waiting_adapters"] = _adapters(chosen.labels.get(_LORA_WAITING, ""))
            max_lora = _int_label(chosen.labels, _LORA_MAX)
            if max_lora is None:
                errors.append(f"{engine.lora.name}: bad {_LORA_MAX} label {chosen.labels.get(_LORA_MAX)!r}")
            else:
                fields["max_adapters"] = max_lora

    info = engine.cache_info
    if info is not None and (sample := select(result.samples.get(info.selector.name), info.selector)):
        if (size := _int_label(sample.labels, info.block_size_label)) is not None:
            fields["cache_block_size"] = size
        if (blocks := _int_label(sample.labels, info.num_blocks_label)) is not None:
            fields["cache_num_blocks"] = blocks
    for attr, selectors in (("cache_block_size", engine.block_size), ("cache_num_blocks", engine.num_blocks)):
        if selectors and (sample := _value(result, selectors)) and (v := _finite(sample, errors)) is not None:
            fields[attr] = int(v)

    if engine.custom:
        custom = dict(base.custom)
        read_any = False
        for metric in engine.custom:
            sample = select(result.samples.get(metric.selector.name), metric.selector)
            if sample is None:
                errors.append(f"custom metric {metric.attribute_key!r}: {metric.selector} not found")
            elif (v := _finite(sample, errors)) is not None:
                custom[metric.attribute_key] = v
                read_any = True
        if read_any:
            fields["custom"] = MappingProxyType(custom)

    if not fields:
        return Extraction(base, False, tuple(errors))
    if base.updated_at:
        fields["scrape_interval"] = max(0.0, updated_at - base.updated_at)
    return Extraction(dataclasses.replace(base, updated_at=updated_at, **fields), True, tuple(errors))
