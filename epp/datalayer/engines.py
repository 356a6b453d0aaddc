"""Which metrics each model-server engine exposes, and samples → :class:`MetricsSnapshot`.

The engine comes from the pod label ``inference.networking.k8s.io/engine-type`` (unknown or
missing → ``vllm``), as upstream's ``core-metrics-extractor``; the names are the built-in table of
spec §3.2 (``docs/proposals/003-model-server-protocol``). vLLM also falls back to the older
``vllm:gpu_cache_usage_perc`` when ``vllm:kv_cache_usage_perc`` is absent.

Partial results are applied: each field that parsed replaces the previous value, the others keep
it, and the problems are returned so the scraper can count and log them.

GIE's metric-name flags (``--total-queued-requests-metric`` and friends, which its chart sets for
SGLang, Triton and trtllm-serve) override a field for every endpoint whatever its engine label
(:func:`with_overrides`): ``name`` or ``name{label=value,...}`` replaces the engine's metric, an
empty value turns the field off (it is then neither read nor reported missing), as GIE does.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple, Protocol

from epp.datalayer.promtext import MetricSelector, ParseResult, Sample, parse, parse_selector, select
from epp.framework.endpoint import MetricsSnapshot

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

DEFAULT_ENGINE = "vllm"

# vllm:lora_requests_info labels (its value is the time the adapter set was last seen).
_LORA_RUNNING = "running_lora_adapters"
_LORA_WAITING = "waiting_lora_adapters"
_LORA_MAX = "max_lora"


def _selectors(*specs: str) -> tuple[MetricSelector, ...]:
    return tuple(parse_selector(s) for s in specs)


@dataclass(frozen=True, slots=True)
class CacheInfoSpec:
    """An info gauge whose labels carry the KV block size and block count."""

    selector: MetricSelector
    block_size_label: str
    num_blocks_label: str


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """Metric selectors for one engine; each field lists alternatives, the first present wins."""

    name: str
    queued: tuple[MetricSelector, ...]
    running: tuple[MetricSelector, ...]
    kv_usage: tuple[MetricSelector, ...]
    lora: MetricSelector | None = None
    cache_info: CacheInfoSpec | None = None
    block_size: tuple[MetricSelector, ...] = ()
    num_blocks: tuple[MetricSelector, ...] = ()
    names: frozenset[str] = field(init=False)
    """The sample names to ask the parser for first (each field's first choice)."""
    fallbacks: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False)
    """(first choice, later choices): parsed only when the first choice is absent."""

    def __post_init__(self) -> None:
        fields = (self.queued, self.running, self.kv_usage, self.block_size, self.num_blocks)
        names = {choices[0].name for choices in fields if choices}
        if self.lora is not None:
            names.add(self.lora.name)
        if self.cache_info is not None:
            names.add(self.cache_info.selector.name)
        fallbacks = tuple(
            (choices[0].name, later)
            for choices in fields
            if (later := tuple(s.name for s in choices[1:] if s.name not in names))
        )
        object.__setattr__(self, "names", frozenset(names))
        object.__setattr__(self, "fallbacks", fallbacks)


ENGINES: Mapping[str, EngineSpec] = MappingProxyType(
    {
        "vllm": EngineSpec(
            name="vllm",
            queued=_selectors("vllm:num_requests_waiting"),
            running=_selectors("vllm:num_requests_running"),
            kv_usage=_selectors("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
            lora=parse_selector("vllm:lora_requests_info"),
            cache_info=CacheInfoSpec(parse_selector("vllm:cache_config_info"), "block_size", "num_gpu_blocks"),
        ),
        "sglang": EngineSpec(
            name="sglang",
            queued=_selectors("sglang:num_queue_reqs"),
            running=_selectors("sglang:num_running_reqs"),
            kv_usage=_selectors("sglang:token_usage"),
            cache_info=CacheInfoSpec(parse_selector("sglang:cache_config_info"), "page_size", "num_pages"),
        ),
        "trtllm-serve": EngineSpec(
            name="trtllm-serve",
            queued=_selectors("trtllm_num_requests_waiting"),
            running=_selectors("trtllm_num_requests_running"),
            kv_usage=_selectors("trtllm_kv_cache_utilization"),
            block_size=_selectors("trtllm_kv_cache_tokens_per_block"),
            num_blocks=_selectors("trtllm_kv_cache_max_blocks"),
        ),
        "triton-tensorrt-llm": EngineSpec(
            name="triton-tensorrt-llm",
            queued=_selectors("nv_trt_llm_request_metrics{request_type=waiting}"),
            running=_selectors("nv_trt_llm_request_metrics{request_type=scheduled}"),
            kv_usage=_selectors("nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=fraction}"),
            block_size=_selectors("nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=tokens_per}"),
            num_blocks=_selectors("nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type=max}"),
        ),
    }
)


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


# GIE reads these labels of any cache-info metric; a metric an engine above declares keeps its own.
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
) -> Extraction:
    """Parse a ``/metrics`` page and extract ``engine``'s fields (see :func:`extract`).

    Later choices (vLLM's old KV-usage name) cost a scan of the page each, so they are looked
    for only when the first choice is absent.
    """
    result = parse(data, engine.names)
    for first, later in engine.fallbacks:
        if first not in result.samples:
            extra = parse(data, later)
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

    if not fields:
        return Extraction(base, False, tuple(errors))
    return Extraction(dataclasses.replace(base, updated_at=updated_at, **fields), True, tuple(errors))
