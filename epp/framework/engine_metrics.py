"""Which metrics each model-server engine exposes, and which engine a pod runs: the engine table.

This is what upstream's ``core-metrics-extractor`` configures (``engineLabelKey``,
``defaultEngine``, ``engineConfigs``) and what the scraper reads each page with, so both sides
share it here. The built-in engines are upstream's ``defaultEngineConfigs`` (spec §3.2 of
``docs/proposals/003-model-server-protocol`` plus the llm-d router's ``triton``); vLLM also
falls back to the older ``vllm:gpu_cache_usage_perc`` when ``vllm:kv_cache_usage_perc`` is absent.

A pod's engine is the value of its ``engineLabelKey`` label (``llm-d.ai/engine-type`` unless
configured), else of GIE's ``inference.networking.k8s.io/engine-type``; a pod with neither, or
naming an engine the table does not have, is read with the default engine's map
(:meth:`EngineTable.lookup`), as upstream's extractor does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from epp.framework.endpoint import ENGINE_TYPE_LABEL
from epp.framework.metric_spec import MetricSelector, parse_selector

__all__ = [
    "DEFAULT_ENGINE",
    "DEFAULT_ENGINE_TABLE",
    "ENGINES",
    "ENGINE_LABEL_KEY",
    "LEGACY_ENGINE_LABEL_KEY",
    "CacheInfoSpec",
    "CustomMetric",
    "EngineSpec",
    "EngineTable",
]

DEFAULT_ENGINE = "vllm"
ENGINE_LABEL_KEY = "llm-d.ai/engine-type"
"""The llm-d router's engine label (``core-metrics-extractor``'s default ``engineLabelKey``)."""
LEGACY_ENGINE_LABEL_KEY = ENGINE_TYPE_LABEL
"""GIE's engine label, read when the configured one is missing or empty (upstream's fallback)."""


@dataclass(frozen=True, slots=True)
class CacheInfoSpec:
    """An info gauge whose labels carry the KV block size and block count."""

    selector: MetricSelector
    block_size_label: str
    num_blocks_label: str


@dataclass(frozen=True, slots=True)
class CustomMetric:
    """An engine's extra scalar metric, stored on the snapshot under ``attribute_key``."""

    attribute_key: str
    selector: MetricSelector


@dataclass(frozen=True, slots=True)
class EngineSpec:
    """Metric selectors for one engine; each field lists alternatives, the first present wins.

    An empty tuple (or None) turns a field off: it is neither read nor reported missing.
    """

    name: str
    queued: tuple[MetricSelector, ...]
    running: tuple[MetricSelector, ...]
    kv_usage: tuple[MetricSelector, ...]
    lora: MetricSelector | None = None
    cache_info: CacheInfoSpec | None = None
    block_size: tuple[MetricSelector, ...] = ()
    num_blocks: tuple[MetricSelector, ...] = ()
    custom: tuple[CustomMetric, ...] = ()
    names: frozenset[str] = field(init=False, compare=False)
    """The sample names to ask the parser for first (each field's first choice)."""
    fallbacks: tuple[tuple[str, tuple[str, ...]], ...] = field(init=False, compare=False)
    """(first choice, later choices): parsed only when the first choice is absent."""

    def __post_init__(self) -> None:
        fields = (self.queued, self.running, self.kv_usage, self.block_size, self.num_blocks)
        names = {choices[0].name for choices in fields if choices}
        names.update(c.selector.name for c in self.custom)
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


def _selectors(*specs: str) -> tuple[MetricSelector, ...]:
    return tuple(parse_selector(s) for s in specs)


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
        # Triton Inference Server for non-LLM models: queue and executions only, no KV cache.
        "triton": EngineSpec(
            name="triton",
            queued=_selectors("nv_inference_pending_request_count"),
            running=_selectors("nv_inference_exec_count"),
            kv_usage=(),
        ),
    }
)
"""The built-in engines, by the name their pods' engine label carries."""


@dataclass(frozen=True, slots=True)
class EngineTable:
    """The engines a scraper knows, which pod label names a pod's engine, and the default engine.

    ``configured`` names the engines a configuration defined itself (``engineConfigs``): GIE's
    metric-name flags override the others' names, never these.
    """

    engines: Mapping[str, EngineSpec] = field(default_factory=lambda: ENGINES)
    default_engine: str = DEFAULT_ENGINE
    label_key: str = ENGINE_LABEL_KEY
    configured: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.default_engine not in self.engines:
            raise ValueError(f"default engine {self.default_engine!r} is not one of {sorted(self.engines)}")

    def label_value(self, labels: Mapping[str, str]) -> str:
        """The engine a pod's labels name (``label_key``, else GIE's label); "" for none."""
        return labels.get(self.label_key) or labels.get(LEGACY_ENGINE_LABEL_KEY) or ""

    def lookup(self, labels: Mapping[str, str]) -> EngineSpec:
        """The spec a pod with ``labels`` is read with: its engine's, else the default engine's."""
        spec = self.engines.get(self.label_value(labels))
        return spec if spec is not None else self.engines[self.default_engine]


DEFAULT_ENGINE_TABLE = EngineTable()
"""The built-in engines, ``vllm`` by default, named by the llm-d router's label (GIE's as fallback)."""
