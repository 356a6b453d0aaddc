"""The prefix indexes' sizes: the Endpoints API and ``/metrics`` report the same numbers, every index included.

The configuration holds the three kinds of holder: the ``approx-prefix-cache-producer`` the loader
adds for a ``prefix-cache-scorer`` that names no producer, the precise chain's
``precise-prefix-cache-producer`` (whose index the API once left out) with the
``prefix-cache-scorer`` reading it, and llm-d's all-in-one ``precise-prefix-cache-scorer`` (its
producer's index, under its own name). After routed requests taught the approximate indexes, each plugin
name's size in ``ListEndpoints`` equals the sum of its ``llm_d_epp_prefix_indexer_size`` series,
and GIE's ``inference_extension_prefix_indexer_size`` is their total.
"""

from __future__ import annotations

import aiohttp
import grpc
import pytest
from pool_modes import ALL_MODES, served

from epp.api import pb
from epp_sim.kube_objects import PoolMode
from epp_sim.pytest_plugin import PoolFactory

CONFIG = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- {name: approximate, type: prefix-cache-scorer}
- {name: kv-index, type: precise-prefix-cache-producer}
- {name: precise, type: prefix-cache-scorer, parameters: {prefixMatchInfoProducerName: kv-index}}
- {name: all-in-one, type: precise-prefix-cache-scorer}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: approximate}, {pluginRef: precise}, {pluginRef: all-in-one}]
"""
PROMPT = "A long shared system prompt for the prefix indexes to learn. " * 8


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_the_api_and_metrics_report_the_same_index_sizes(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=2, objects=served(mode, "m"), picker_args=["--config-text", CONFIG])
    for i in range(3):
        assert (await env.route({"model": "m", "prompt": f"{PROMPT} question {i}"})).status == 200
    async with grpc.aio.insecure_channel(env.picker.health_target) as channel:
        listing = await pb.EndpointsStub(channel).ListEndpoints(pb.ListEndpointsRequest(), timeout=10)
    (pool,) = listing.pools
    api = dict(pool.prefix_index_sizes)
    assert set(api) == {"approx-prefix-cache-producer", "kv-index", "all-in-one"}
    assert api["approx-prefix-cache-producer"] > 0 and api["kv-index"] == 0  # no pod publishes KV events here

    async with aiohttp.ClientSession() as http, http.get(env.picker.metrics_url) as resp:
        assert resp.status == 200  # a scrape sets the index gauges from the configuration in force
    registry = env.runtime.metrics.registry
    registry_sizes: dict[str, float] = {}
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "llm_d_epp_prefix_indexer_size":
                name = sample.labels["plugin_name"]
                registry_sizes[name] = registry_sizes.get(name, 0) + sample.value
    assert set(api) <= set(registry_sizes)
    assert {name: registry_sizes[name] for name in api} == api
    assert registry.get_sample_value("inference_extension_prefix_indexer_size") == sum(api.values())
