"""Upstream WVA's PromQL against the Prometheus HTTP API (``--prometheus-url``), vLLM and SGLang.

The queries are upstream's (``internal/collector/registration/``), per engine (#1351: SGLang's
``sglang:token_usage``, ``sglang:num_queue_reqs``, ``sglang:max_total_num_tokens``, its token
histograms and cached/prompt token counters), filtered by ``namespace`` and ``model_name`` (values
escaped like upstream's ``EscapePromQLValue``), grouped per instance (#1121): ``pod:port`` when the
``instance`` label has a port, so each data-parallel rank scraped on its own port is a reading.
NaN and ±Inf become 0 (upstream ``fixNaN``); the queue is truncated to an integer. TLS and the
bearer token are :mod:`epp.autoscale.prometheus_access`'s; redirects are not followed.

Series of the model from pods that belong to no variant (a deleted workload's, one no scaler
declares) are dropped and counted (``wva_pod_mapping_miss_total``).

One deliberate difference: vLLM's prefix-cache counters are queried as
``vllm:prefix_cache_hits_total`` / ``..._queries_total``, the names a real vLLM exposes (upstream
queries them without ``_total`` and reads nothing). Model-level signals: the picker's flow-control
queue (size, bytes; upstream's query, which has no namespace label, GIE #2309) and its successful
scheduling rate for the model (the throughput analyzer's arrival rate).
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import aiohttp

from epp.autoscale.engine_args import SGLANG, VLLM
from epp.autoscale.inputs import InputError, ModelSignals, PodTarget
from epp.autoscale.prometheus_access import PrometheusAccess
from epp.autoscale.types import ModelKey, ReplicaMetrics

__all__ = ["QUERIES", "PrometheusSource"]

log = logging.getLogger(__name__)

_BY = "max by (instance, pod, llm_d_ai_variant)"
_SUM_BY = "sum by (instance, pod, llm_d_ai_variant)"
_F = '{{namespace="{ns}",model_name="{model}"}}'


def _ratio(num: str, den: str, window: str) -> str:
    return f"{_BY} (rate({num}{_F}[{window}]) / rate({den}{_F}[{window}]))"


def _queries(p: str, *, kv: str, waiting: str, capacity: str, prompt: str, gen: str, itl: str) -> dict[str, str]:
    return {
        "kv": f"{_BY} (max_over_time({p}:{kv}{_F}[1m]))",
        "queue": f"{_BY} (max_over_time({p}:{waiting}{_F}[1m]))",
        "capacity": capacity,
        "avg_output": _ratio(f"{p}:{gen}_sum", f"{p}:{gen}_count", "5m"),
        "avg_input": _ratio(f"{p}:{prompt}_sum", f"{p}:{prompt}_count", "5m"),
        "avg_itl": _ratio(f"{p}:{itl}_sum", f"{p}:{itl}_count", "1m"),
        "generation_rate": f"{_SUM_BY} (rate({p}:{gen}_sum{_F}[1m]))",
        "kv_instant": f"{_BY} ({p}:{kv}{_F})",
        "request_rate": f"{_SUM_BY} (rate({p}:{gen}_count{_F}[1m]))",
    }


QUERIES: Mapping[str, Mapping[str, str]] = {
    VLLM: {
        **_queries(
            "vllm",
            kv="kv_cache_usage_perc",
            waiting="num_requests_waiting",
            capacity=(
                "max by (instance, pod, llm_d_ai_variant, num_gpu_blocks, block_size) "
                '(vllm:cache_config_info{{namespace="{ns}"}})'
            ),
            prompt="request_prompt_tokens",
            gen="request_generation_tokens",
            itl="inter_token_latency_seconds",
        ),
        "prefix_hit_rate": _ratio("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total", "5m"),
        "requests": 'sum(increase(vllm:request_success_total{{namespace="{ns}",model_name="{model}"}}[{window}]))',
    },
    SGLANG: {
        **_queries(
            "sglang",
            kv="token_usage",
            waiting="num_queue_reqs",
            capacity=f"{_BY} (sglang:max_total_num_tokens{_F})",
            prompt="prompt_tokens_histogram",
            gen="generation_tokens_histogram",
            itl="inter_token_latency_seconds",
        ),
        "prefix_hit_rate": (
            f"{_SUM_BY} (rate(sglang:cached_tokens_total{_F}[5m])) / "
            f"{_SUM_BY} (rate(sglang:prompt_tokens_total{_F}[5m]))"
        ),
        "requests": 'sum(increase(sglang:num_requests_total{{namespace="{ns}",model_name="{model}"}}[{window}]))',
    },
}
_FIELDS = ("avg_output", "avg_input", "prefix_hit_rate", "avg_itl", "generation_rate", "kv_instant", "request_rate")
_QUEUE = (
    'sum(inference_extension_flow_control_queue_{what}{{target_model_name="{model}"}}) or '
    'sum(inference_extension_flow_control_queue_{what}{{model_name="{model}",target_model_name=""}})'
)
_ARRIVALS = (
    "sum by (namespace) (rate(inference_extension_scheduler_attempts_total"
    '{{status="success",namespace="{ns}",target_model_name="{model}"}}[1m]))'
)


def _escape(value: str) -> str:
    """Upstream's ``EscapePromQLValue``: backslashes doubled, double quotes escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


def _instance(labels: Mapping[str, str]) -> tuple[str, str] | None:
    """``(pod, instance key)``: ``pod:port`` for a ported instance, else the pod."""
    pod = labels.get("pod") or labels.get("pod_name")
    if not pod:
        return None
    _, sep, port = (labels.get("instance") or "").rpartition(":")
    return pod, f"{pod}:{port}" if sep and port.isdigit() else pod


class PrometheusSource:
    """Upstream's queries against the Prometheus HTTP API (``/api/v1/query``)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        access: PrometheusAccess | str,
        *,
        timeout: float = 10.0,
        on_unattributed: Callable[[str, int], None] | None = None,
    ) -> None:
        self._session = session
        self._access = access if isinstance(access, PrometheusAccess) else PrometheusAccess(access)
        self._url = self._access.url.rstrip("/") + "/api/v1/query"
        self._timeout = timeout
        self._on_unattributed = on_unattributed

    async def query(self, promql: str) -> list[tuple[Mapping[str, str], float]]:
        """An instant query's vector; NaN and ±Inf become 0 (upstream ``fixNaN``)."""
        try:
            async with asyncio.timeout(self._timeout):
                access = self._access
                async with self._session.get(
                    self._url,
                    params={"query": promql},
                    headers=await access.headers(),
                    ssl=access.tls if access.tls is not None else True,
                    server_hostname=access.server_name,
                    allow_redirects=False,
                ) as resp:
                    if 300 <= resp.status < 400:
                        raise InputError(f"Prometheus query {promql!r}: redirected ({resp.status}), not followed")
                    if resp.status in (401, 403):
                        raise InputError(f"Prometheus query {promql!r}: HTTP {resp.status} (check the bearer token)")
                    body: Any = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, OSError, ValueError) as e:
            raise InputError(f"Prometheus query {promql!r} failed: {e!r}") from e
        if not isinstance(body, Mapping) or body.get("status") != "success":
            error = body.get("error") if isinstance(body, Mapping) else body
            raise InputError(f"Prometheus query {promql!r} failed: {error!r}")
        out: list[tuple[Mapping[str, str], float]] = []
        for series in (body.get("data") or {}).get("result") or ():
            try:
                value = float(series["value"][1])
            except (KeyError, IndexError, TypeError, ValueError) as e:
                raise InputError(f"Prometheus query {promql!r}: malformed sample {series!r}") from e
            out.append((series.get("metric") or {}, value if math.isfinite(value) else 0.0))
        return out

    def _fmt(self, template: str, key: ModelKey, **extra: str) -> str:
        return template.format(ns=_escape(key.namespace), model=_escape(key.model_id), **extra)

    async def _engine(self, key: ModelKey, engine: str, wanted: set[str]) -> list[ReplicaMetrics]:
        q = QUERIES[engine]
        names = ("kv", "queue", "capacity", *_FIELDS)
        results = await asyncio.gather(*(self.query(self._fmt(q[n], key)) for n in names))
        by_name = dict(zip(names, results, strict=True))
        values: dict[tuple[str, str], dict[str, float]] = {}
        strangers: set[str] = set()
        for name in ("kv", "queue"):
            for labels, value in by_name[name]:
                inst = _instance(labels)
                if inst is not None and inst[0] in wanted:
                    values.setdefault(inst, {"kv": 0.0, "queue": 0.0})[name] = value  # missing one: 0
                elif inst is not None:
                    strangers.add(inst[0])
        if strangers and self._on_unattributed is not None:
            self._on_unattributed(key.namespace, len(strangers))  # the model's series from pods of no variant
        capacity: dict[tuple[str, str], int] = {}
        for labels, value in by_name["capacity"]:
            inst = _instance(labels)
            if inst is None or inst not in values:
                continue  # only instances the model-scoped queries found (cache_config has no model label)
            try:
                blocks = int(labels["num_gpu_blocks"]) * int(labels["block_size"]) if engine == VLLM else int(value)
            except (KeyError, ValueError):
                continue
            capacity[inst] = max(0, blocks)
        extras: dict[tuple[str, str], dict[str, float]] = {}
        for name in _FIELDS:
            for labels, value in by_name[name]:
                inst = _instance(labels)
                if inst is not None and inst in values:
                    extras.setdefault(inst, {})[name] = value
        out = []
        for inst, v in sorted(values.items()):
            e = extras.get(inst, {})
            out.append(
                ReplicaMetrics(
                    pod=inst[0],
                    kv_cache_usage=v["kv"],
                    queue_length=float(int(v["queue"])),
                    instance=inst[1],
                    kv_instant=e.get("kv_instant", -1.0),
                    tokens_capacity=capacity.get(inst, 0),
                    avg_input_tokens=e.get("avg_input", 0.0),
                    avg_output_tokens=e.get("avg_output", 0.0),
                    prefix_hit_rate=e.get("prefix_hit_rate", 0.0),
                    avg_itl=e.get("avg_itl", 0.0),
                    request_rate=e.get("request_rate", 0.0),
                    generation_rate=e.get("generation_rate", 0.0),
                )
            )
        return out

    async def collect(self, key: ModelKey, pods: Sequence[PodTarget]) -> list[ReplicaMetrics]:
        engines = sorted({SGLANG if p.engine == SGLANG else VLLM for p in pods}) or [VLLM]
        wanted = {p.name for p in pods}
        per_engine = await asyncio.gather(*(self._engine(key, e, wanted) for e in engines))
        return [r for readings in per_engine for r in readings]

    async def idle(self, key: ModelKey, pods: Sequence[PodTarget], window: float) -> bool | None:
        engines = sorted({SGLANG if p.engine == SGLANG else VLLM for p in pods}) or [VLLM]
        total = 0.0
        for engine in engines:
            try:
                result = await self.query(self._fmt(QUERIES[engine]["requests"], key, window=f"{max(1, int(window))}s"))
            except InputError as e:
                log.warning("idle check failed; not scaling to zero", extra={"model": str(key), "error": str(e)})
                return None
            if not result:
                return None
            total += result[0][1]
        return total == 0

    async def model_signals(self, key: ModelKey) -> ModelSignals | None:
        try:
            size, size_bytes, arrivals = await asyncio.gather(
                self.query(self._fmt(_QUEUE, key, what="size")),
                self.query(self._fmt(_QUEUE, key, what="bytes")),
                self.query(self._fmt(_ARRIVALS, key)),
            )
        except InputError as e:
            log.warning("cannot read the picker's signals", extra={"model": str(key), "error": str(e)})
            return None
        return ModelSignals(
            queue_size=sum(v for _, v in size),
            queue_bytes=sum(v for _, v in size_bytes),
            arrival_rate=sum(v for _, v in arrivals),
        )
