"""Upstream's PromQL against a Prometheus API double (the HTTP contract: /api/v1/query, vectors):
vLLM and SGLang queries, per-instance readings, escaping, NaN/Inf, the picker's signals, errors."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from epp.autoscale.inputs import InputError, ModelSignals, PodTarget
from epp.autoscale.prometheus import PrometheusSource
from epp.autoscale.types import ModelKey, ReplicaMetrics

KEY = ModelKey("ns", "llama")


def _vector(*series: tuple[dict[str, str], str]) -> dict[str, Any]:
    return {
        "status": "success",
        "data": {"resultType": "vector", "result": [{"metric": m, "value": [1.0, v]} for m, v in series]},
    }


class _Prometheus:
    """Answers each query with the first registered response whose needle it contains, else an empty vector."""

    def __init__(self) -> None:
        self.responses: dict[str, Any] = {}
        self.seen: list[str] = []
        self.url = ""

    async def query(self, request: web.Request) -> web.Response:
        q = request.query["query"]
        self.seen.append(q)
        for needle, body in self.responses.items():
            if needle in q:
                return web.json_response(body, status=400 if body.get("status") == "error" else 200)
        return web.json_response(_vector())


@pytest.fixture
async def prometheus() -> AsyncIterator[_Prometheus]:
    fake = _Prometheus()
    app = web.Application()
    app.router.add_get("/api/v1/query", fake.query)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    fake.url = f"http://127.0.0.1:{runner.addresses[0][1]}/"
    try:
        yield fake
    finally:
        await runner.cleanup()


async def test_upstream_queries_per_instance_and_mapping(
    session: aiohttp.ClientSession, prometheus: _Prometheus
) -> None:
    prometheus.responses["max_over_time(vllm:kv_cache_usage_perc"] = _vector(
        ({"pod": "a", "instance": "10.0.0.1:8000"}, "0.5"),
        ({"pod": "a", "instance": "10.0.0.1:8001"}, "0.7"),  # a second data-parallel rank on its own port
        ({"pod_name": "b"}, "NaN"),
        ({"pod": "stale"}, "0.9"),
    )
    prometheus.responses["vllm:num_requests_waiting"] = _vector(
        ({"pod": "a", "instance": "10.0.0.1:8000"}, "3.7"), ({"pod": "c"}, "+Inf"), ({}, "9")
    )
    prometheus.responses["vllm:cache_config_info"] = _vector(
        ({"pod": "a", "instance": "10.0.0.1:8000", "num_gpu_blocks": "100", "block_size": "16"}, "1")
    )
    prometheus.responses[
        'vllm:request_generation_tokens_sum{namespace="team\\"a",model_name="meta/llama\\\\3"}[5m])'
    ] = _vector(({"pod": "a", "instance": "10.0.0.1:8000"}, "42"))
    strangers: list[tuple[str, int]] = []
    source = PrometheusSource(session, prometheus.url, on_unattributed=lambda ns, n: strangers.append((ns, n)))
    key = ModelKey('team"a', "meta/llama\\3")
    pods = [PodTarget(key.namespace, n, "", 0) for n in ("a", "b", "c")]
    readings = {r.key: r for r in await source.collect(key, pods)}
    assert set(readings) == {"a:8000", "a:8001", "b", "c"}  # "stale" is not one of the controller's pods
    assert strangers == [('team"a', 1)]  # counted as a pod mapping miss
    assert (readings["a:8000"].kv_cache_usage, readings["a:8000"].queue_length) == (0.5, 3.0)  # queue truncated
    assert readings["a:8000"].tokens_capacity == 1600 and readings["a:8001"].tokens_capacity == 0
    assert readings["a:8000"].avg_output_tokens == 42.0
    assert readings["b"] == ReplicaMetrics("b", 0.0, 0.0, instance="b")  # NaN → 0; missing queue → 0
    assert readings["c"].kv_cache_usage == 0.0  # +Inf → 0; missing KV → 0
    assert (
        'max by (instance, pod, llm_d_ai_variant) (max_over_time(vllm:kv_cache_usage_perc{namespace="team\\"a",'
        'model_name="meta/llama\\\\3"}[1m]))' in prometheus.seen
    )
    # the real counter names (a vLLM exposes *_total)
    assert any("rate(vllm:prefix_cache_hits_total{" in q for q in prometheus.seen)


async def test_sglang_pods_are_read_with_sglangs_names(session: aiohttp.ClientSession, prometheus: _Prometheus) -> None:
    prometheus.responses["sglang:token_usage{"] = _vector(({"pod": "s"}, "0.6"))
    prometheus.responses["sglang:num_queue_reqs"] = _vector(({"pod": "s"}, "4"))
    prometheus.responses["sglang:max_total_num_tokens"] = _vector(({"pod": "s"}, "20000"))
    source = PrometheusSource(session, prometheus.url)
    [reading] = await source.collect(KEY, [PodTarget("ns", "s", "", 0, engine="sglang")])
    assert (reading.kv_cache_usage, reading.queue_length, reading.tokens_capacity) == (0.6, 4.0, 20000)
    assert not any("vllm:" in q for q in prometheus.seen)
    prometheus.responses["sglang:num_requests_total"] = _vector(({}, "0"))
    assert await source.idle(KEY, [PodTarget("ns", "s", "", 0, engine="sglang")], 60) is True


async def test_the_pickers_signals(session: aiohttp.ClientSession, prometheus: _Prometheus) -> None:
    prometheus.responses["flow_control_queue_size"] = _vector(({}, "3"))
    prometheus.responses["flow_control_queue_bytes"] = _vector(({}, "4096"))
    prometheus.responses["scheduler_attempts_total"] = _vector(({"namespace": "ns"}, "2.5"))
    source = PrometheusSource(session, prometheus.url)
    assert await source.model_signals(KEY) == ModelSignals(queue_size=3, queue_bytes=4096, arrival_rate=2.5)
    assert (
        'sum by (namespace) (rate(inference_extension_scheduler_attempts_total{status="success",namespace="ns",'
        'target_model_name="llama"}[1m]))' in prometheus.seen
    )
    prometheus.responses["flow_control_queue_size"] = {"status": "error", "error": "bad"}
    assert await source.model_signals(KEY) is None  # logged; the cycle goes on without them


async def test_errors_and_idle(session: aiohttp.ClientSession, prometheus: _Prometheus) -> None:
    source = PrometheusSource(session, prometheus.url)
    prometheus.responses["kv_cache_usage_perc"] = {"status": "error", "error": "unexpected query"}
    with pytest.raises(InputError, match="unexpected query"):
        await source.collect(KEY, [])
    assert await source.idle(KEY, [], 600) is None  # no data → unknown, never idle
    prometheus.responses["request_success_total"] = _vector(({}, "0"))
    assert await source.idle(KEY, [], 600) is True
    assert prometheus.seen[-1] == 'sum(increase(vllm:request_success_total{namespace="ns",model_name="llama"}[600s]))'
    prometheus.responses["request_success_total"] = _vector(({}, "4"))
    assert await source.idle(KEY, [], 600) is False
    prometheus.responses["request_success_total"] = {"status": "error", "error": "down"}
    assert await source.idle(KEY, [], 600) is None  # error → unknown


async def test_unreachable(session: aiohttp.ClientSession) -> None:
    source = PrometheusSource(session, "http://127.0.0.1:1", timeout=1.0)
    with pytest.raises(InputError, match="failed"):
        await source.collect(KEY, [])
