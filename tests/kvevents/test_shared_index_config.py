"""llm-d's ``kvBlockIndexConfig.redisConfig`` / ``valkeyConfig`` on the precise producer: its keys, defaults and
precedence, what is refused naming the field, and a picker that starts without its server (routing on, said)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from precise_cluster import cluster, sample_prompt

from epp.config.loader import load_config
from epp.framework.endpoint import Endpoint, EndpointState
from epp.framework.plugin import PluginConfigError, PluginContext, PluginRegistry
from epp.framework.request import ApiKind, InferenceRequest
from epp.framework.scheduling import CycleState
from epp.kvevents.index import KvBlockIndex
from epp.kvevents.redis_index import RedisBlockIndex
from epp.plugins import register_in_tree
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer, create
from epp.requestcontrol.plugin_series import PluginSeries, Readings
from epp.telemetry.metrics import EppMetrics
from epp_sim.ports import free_port
from epp_sim.precise_prefix import ALL_IN_ONE, precise_picker_config
from epp_sim.stack.valkey import ValkeyServer
from epp_sim.waits import wait_until

FIELD = r"precise-prefix-cache-producer\.parameters\.indexerConfig\.kvBlockIndexConfig"


def _producer(
    block_index: dict[str, Any], health: Callable[[str, bool], None] | None = None
) -> PrecisePrefixCacheProducer:
    params = {"indexerConfig": {"kvBlockIndexConfig": block_index}}
    context = PluginContext(pool_name="pool", pool_namespace="ns", health=health)
    return create("precise-prefix-cache-producer", params, context)


def _shared(producer: PrecisePrefixCacheProducer) -> RedisBlockIndex:
    assert isinstance(producer.index, RedisBlockIndex)
    return producer.index


def test_llm_d_keys_defaults_and_precedence() -> None:
    redis = _shared(_producer({"redisConfig": {"address": "redis-0:6380", "backendType": "redis"}}))
    assert (redis.settings.url, redis.settings.backend_type) == ("redis://redis-0:6380", "redis")
    assert redis.prefix == "{epp-kv:ns/pool/precise-prefix-cache-producer}"
    default = _shared(_producer({"redisConfig": {}}))
    assert default.settings.url == "redis://127.0.0.1:6379"  # upstream's default address
    valkey = _shared(_producer({"valkeyConfig": {"backendType": "redis"}}))  # forced to valkey, as upstream
    assert (valkey.settings.url, valkey.settings.backend_type) == ("redis://127.0.0.1:6379", "valkey")
    both = _shared(
        _producer(
            {
                "redisConfig": {"address": "redis://r:1"},
                "valkeyConfig": {"address": "valkeys://v:2", "enableRDMA": True},
                "inMemoryConfig": {"size": 10},
            }
        )
    )
    assert both.settings.url == "rediss://v:2"  # valkey over redis over in-memory
    assert isinstance(_producer({"inMemoryConfig": {"size": 10}}).index, KvBlockIndex)


@pytest.mark.parametrize(
    ("block_index", "message"),
    [
        ({"redisConfig": {"address": "http://r:1"}}, FIELD + r"\.redisConfig\.address: 'http://r:1': scheme 'http'"),
        ({"valkeyConfig": {"address": "v:port"}}, FIELD + r"\.valkeyConfig\.address: 'v:port'"),
        ({"valkeyConfig": {"adress": "v:1"}}, FIELD + r"\.valkeyConfig: unknown field\(s\) \['adress'\]"),
        ({"redisConfig": {"enableRDMA": "yes"}}, FIELD + r"\.redisConfig\.enableRDMA"),
        ({"costAwareMemoryConfig": {"size": "2GiB"}}, FIELD + r"\.costAwareMemoryConfig: the cost-aware index"),
        (
            {"costAwareMemoryConfig": {}, "valkeyConfig": {}},
            FIELD + r"\.costAwareMemoryConfig: the cost-aware index is not supported",
        ),
    ],
)
def test_bad_settings_are_refused_naming_the_field(block_index: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginConfigError, match=message):
        _producer(block_index)


def test_enable_rdma_is_reported_as_without_effect(tokenizer_dir: Path) -> None:
    registry = PluginRegistry()
    register_in_tree(registry)
    text = precise_picker_config(tokenizer_dir, 5557, index="valkey://v:1").replace(
        "address: 'valkey://v:1'", "address: 'valkey://v:1', enableRDMA: true"
    )
    notices = {n.setting: n.detail for n in load_config(text, registry, PluginContext()).notices}
    assert "over TCP" in notices["indexerConfig.kvBlockIndexConfig.valkeyConfig.enableRDMA"]


async def test_a_picker_starts_without_its_server_routes_without_match_info_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    server = ValkeyServer(tmp_path / "valkey")  # its port chosen, nothing listening yet
    details: list[tuple[str, bool]] = []
    producer = _producer({"valkeyConfig": {"address": server.url}}, lambda name, ok: details.append((name, ok)))
    detail = "kv-index/ns/pool/precise-prefix-cache-producer"
    index = _shared(producer)
    pod = EndpointState(Endpoint("ns", "pod0-rank-0", "pod0", "127.0.0.2", free_port("127.0.0.2")))
    try:
        producer.endpoints_added([pod])  # the runtime's first call: the index starts here, not at load
        await wait_until(lambda: index.disconnects == 1, timeout=10, message="the failed start said")
        assert "kv-index server unreachable" in caplog.text
        assert details == [(detail, False)]  # the health detail: NOT_SERVING, readiness untouched
        request = InferenceRequest("r", model="m", target_model="m", api=ApiKind.COMPLETIONS)
        request.token_ids = list(range(64))
        await producer.produce(request, [pod])
        assert producer.prefix_match(CycleState(), request, [pod]) is None  # no match info
        assert index.lookup_failures == 1
        metrics = EppMetrics()
        series = metrics.series(PluginSeries)
        labels = {"plugin_name": "precise-prefix-cache-producer"}
        series.publish(Readings.of([producer]))
        assert metrics.registry.get_sample_value("epp_kv_index_backend_connected", labels) == 0
        assert metrics.registry.get_sample_value("epp_kv_index_backend_lookup_failures_total", labels) == 1
        async with server:  # the server comes up: the picker finds it without a restart
            await wait_until(lambda: index.connected, timeout=10, message="connected once the server is up")
            series.publish(Readings.of([producer]))
            assert metrics.registry.get_sample_value("epp_kv_index_backend_connected", labels) == 1
            assert metrics.registry.get_sample_value("epp_kv_index_backend_disconnects_total", labels) == 1
            assert details == [(detail, False), (detail, True)]
    finally:
        await producer.aclose()


async def test_the_deprecated_scorer_routes_on_a_shared_index(tokenizer_dir: Path, epp_valkey: ValkeyServer) -> None:
    """``precise-prefix-cache-scorer`` scores what its ``produce`` published from the server, not 0."""
    async with cluster(tokenizer_dir, pods=3, replicas=(ALL_IN_ONE,), index=epp_valkey.url) as c:
        (replica,) = c.replicas
        index = replica.producer.index
        assert isinstance(index, RedisBlockIndex)
        await wait_until(lambda: index.connected, timeout=10)
        for i, server in enumerate(c.servers):
            prompt = sample_prompt(60 + i)
            await c.send(server, prompt)
            await c.synced()
            await wait_until(lambda: index.flushed, timeout=10)
            assert await replica.pick(prompt + " and then?") == server.host
