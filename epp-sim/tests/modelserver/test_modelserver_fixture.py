"""``model_servers``: N simulators on distinct 127.0.0.x addresses, sharing a port; pins and stats."""

from __future__ import annotations

import aiohttp
import pytest

from epp_sim.modelserver import ModelServer, SimConfig, model_servers
from epp_sim.ports import free_port


async def test_servers_on_distinct_addresses_share_a_port() -> None:
    port = free_port("127.0.0.5")
    async with model_servers(3, start=5, port=port, config=SimConfig(time_scale=100.0)) as servers:
        assert [s.host for s in servers] == ["127.0.0.5", "127.0.0.6", "127.0.0.7"]
        assert {s.port for s in servers} == {port}
        assert servers[1].url == f"http://127.0.0.6:{port}" and servers[1].address == f"127.0.0.6:{port}"
        body = {"prompt": "hi", "max_tokens": 2}
        async with aiohttp.ClientSession() as http, http.post(servers[1].url + "/v1/completions", json=body) as r:
            assert r.status == 200
        assert [s.stats()["requests"] for s in servers] == [0, 1, 0]
        servers[2].pin(waiting=9, kv_cache_usage=0.5)
        assert servers[2].engine.gauges().waiting == 9
        assert servers[0].engine.gauges().waiting == 0
        servers[2].pin(waiting=None)
        assert servers[2].engine.pins.kv_cache_usage == 0.5 and servers[2].engine.pins.waiting is None
        servers[2].unpin()
        assert servers[2].engine.gauges().kv_cache_usage == 0.0


async def test_per_server_configs_and_port_zero() -> None:
    configs = [SimConfig(model="m-a"), SimConfig(model="m-b")]
    async with model_servers(2, config=configs) as servers:
        assert servers[0].port != 0 and servers[1].port != 0
        assert [s.config.model for s in servers] == ["m-a", "m-b"]
    with pytest.raises(ValueError, match="2 configs for 3 servers"):
        async with model_servers(3, config=configs):
            pass


async def test_a_taken_address_is_reported_and_nothing_leaks() -> None:
    async with ModelServer(host="127.0.0.9") as first:
        second = ModelServer(host="127.0.0.9", port=first.port)
        with pytest.raises(OSError, match=f"cannot bind 127.0.0.9:{first.port}"):
            await second.start()
        await second.stop()  # stopping a server that never started is a no-op
