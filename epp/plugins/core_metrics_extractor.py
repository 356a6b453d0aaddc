"""core-metrics-extractor: which engine a pod runs, and which metric means what for each engine.

Parameters, as the llm-d router's (``pkg/epp/framework/plugins/datalayer/extractor/metrics``):

- ``engineLabelKey`` (default ``llm-d.ai/engine-type``): the pod label naming the engine; GIE's
  ``inference.networking.k8s.io/engine-type`` is read when it is missing or empty.
- ``defaultEngine`` (default ``vllm``): the engine of pods with no engine label, or with one
  the table does not know. It must name a built-in engine or one of ``engineConfigs``.
- ``engineConfigs``: a list of ``name`` plus metric specs (``name`` or ``name{label=value}``):
  ``queuedRequestsSpec``, ``runningRequestsSpec``, ``kvUsageSpec``, ``loraSpec``,
  ``cacheInfoSpec`` (an info gauge whose labels ``cacheBlockSizeLabelName`` and
  ``cacheNumBlocksLabelName``, default ``block_size`` and ``num_gpu_blocks``, carry the block size
  and count), ``cacheBlockSizeSpec`` and ``cacheNumBlocksSpec`` (the same as plain gauges), and
  ``customMetrics`` (``attributeKey`` + ``metricSpec``: stored on the snapshot's ``custom``).
  A spec left out or "" is not read. An entry named like a built-in engine (vllm, sglang,
  trtllm-serve, triton-tensorrt-llm, triton) replaces it whole, as upstream: the fields it
  leaves out are off, not inherited. The name ``default`` is reserved, as upstream.

Everything is checked here, when the configuration loads; the table the plugin exposes is the
built-ins plus the configured engines, with :attr:`EngineTable.configured` naming the latter so
GIE's metric-name flags never override what the configuration wrote.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from epp.framework.engine_metrics import (
    DEFAULT_ENGINE,
    ENGINE_LABEL_KEY,
    ENGINES,
    CacheInfoSpec,
    CustomMetric,
    EngineSpec,
    EngineTable,
)
from epp.framework.metric_spec import MetricSelector, SelectorError, parse_selector
from epp.framework.params import Params
from epp.framework.plugin import NamedPlugin, PluginConfigError, PluginContext, PluginKind

__all__ = ["TYPE", "CoreMetricsExtractor", "create"]

TYPE = "core-metrics-extractor"
_RESERVED_ENGINE = "default"  # upstream's key for the default engine's mapping
_BLOCK_SIZE_LABEL = "block_size"
_NUM_BLOCKS_LABEL = "num_gpu_blocks"


class CoreMetricsExtractor(NamedPlugin):
    """A configured extractor; the scraper reads each pod's page with :attr:`engine_table`."""

    __slots__ = ("_table",)
    plugin_type = TYPE
    kinds = frozenset({PluginKind.DATA_EXTRACTOR})

    def __init__(self, name: str, table: EngineTable) -> None:
        super().__init__(name)
        self._table = table

    @property
    def engine_table(self) -> EngineTable:
        return self._table


def _selector(p: Params, where: str, key: str) -> MetricSelector | None:
    spec = p.text(key)
    if not spec:
        return None
    try:
        return parse_selector(spec)
    except SelectorError as e:
        raise PluginConfigError(f"{where}.{key}: {e}") from None


def _choices(p: Params, where: str, key: str) -> tuple[MetricSelector, ...]:
    selector = _selector(p, where, key)
    return (selector,) if selector is not None else ()


def _custom_metrics(p: Params, where: str) -> tuple[CustomMetric, ...]:
    metrics: list[CustomMetric] = []
    for i, entry in enumerate(p.mappings("customMetrics")):
        at = f"{where}.customMetrics[{i}]"
        key = entry.text("attributeKey")
        if not key:
            raise PluginConfigError(f"{at}.attributeKey: must be a non-empty string, got {key!r}")
        if any(m.attribute_key == key for m in metrics):
            raise PluginConfigError(f"{at}.attributeKey: {key!r} is used twice in this engine")
        selector = _selector(entry, at, "metricSpec")
        if selector is None:
            raise PluginConfigError(f"{at}.metricSpec: must be a metric spec such as 'name{{label=value}}'")
        entry.done()
        metrics.append(CustomMetric(key, selector))
    return tuple(metrics)


def _engine(p: Params, where: str) -> EngineSpec:
    name = p.text("name")
    if not name:
        raise PluginConfigError(f"{where}.name: must be a non-empty string, got {name!r}")
    if name == _RESERVED_ENGINE:
        raise PluginConfigError(f"{where}.name: {_RESERVED_ENGINE!r} is reserved (name the engine itself)")
    cache_info = _selector(p, where, "cacheInfoSpec")
    block_label = p.text("cacheBlockSizeLabelName") or _BLOCK_SIZE_LABEL
    blocks_label = p.text("cacheNumBlocksLabelName") or _NUM_BLOCKS_LABEL
    spec = EngineSpec(
        name=name,
        queued=_choices(p, where, "queuedRequestsSpec"),
        running=_choices(p, where, "runningRequestsSpec"),
        kv_usage=_choices(p, where, "kvUsageSpec"),
        lora=_selector(p, where, "loraSpec"),
        cache_info=CacheInfoSpec(cache_info, block_label, blocks_label) if cache_info is not None else None,
        block_size=_choices(p, where, "cacheBlockSizeSpec"),
        num_blocks=_choices(p, where, "cacheNumBlocksSpec"),
        custom=_custom_metrics(p, where),
    )
    p.done()
    return spec


def create(name: str, params: Mapping[str, Any], context: PluginContext) -> CoreMetricsExtractor:
    p = Params(TYPE, params)
    label_key = p.text("engineLabelKey") or ENGINE_LABEL_KEY
    default_engine = p.text("defaultEngine") or DEFAULT_ENGINE
    configured: dict[str, EngineSpec] = {}
    for i, entry in enumerate(p.mappings("engineConfigs")):
        where = f"{TYPE}.parameters.engineConfigs[{i}]"
        spec = _engine(entry, where)
        if spec.name in configured:
            raise PluginConfigError(f"{where}.name: engine {spec.name!r} is configured twice")
        configured[spec.name] = spec
    p.done()
    engines = {**configured, **{n: s for n, s in ENGINES.items() if n not in configured}}
    if default_engine not in engines:
        raise PluginConfigError(
            f"{TYPE}.parameters.defaultEngine: {default_engine!r} is neither a built-in engine nor in "
            f"engineConfigs (engines: {', '.join(sorted(engines))})"
        )
    table = EngineTable(
        engines=MappingProxyType(engines),
        default_engine=default_engine,
        label_key=label_key,
        configured=frozenset(configured),
    )
    return CoreMetricsExtractor(name, table)
