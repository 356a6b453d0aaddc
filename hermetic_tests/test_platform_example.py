"""A platform team's own hermetic test: their pool, objectives, rewrite and config, against the real picker.

This file is the worked example of docs/testing.md (a test keeps the two identical). It needs
only epp and epp-sim installed: the fixtures come from epp-sim's pytest plugin.
"""

import json
from pathlib import Path

import aiohttp
import pytest

from epp_sim.kube_objects import inference_objective, model_rewrite
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory

POOL = "chat-pool"
OUR_CONFIG = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: prefix-cache-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
  - {pluginRef: prefix-cache-scorer, weight: 3}
"""
OUR_OBJECTS = [
    inference_objective("interactive", 10, POOL),
    inference_objective("batch", -1, POOL),
    model_rewrite("llama-canary", POOL, {"llama-3-8b": 90, "llama-3-8b-ft": 10}, model="llama"),
]
OUR_SERVERS = SimConfig(model="llama-3-8b", lora_modules={"llama-3-8b-ft": "/adapters/ft"}, max_loras=2)
BUSY = {"waiting": 4, "kv_cache_usage": 0.6}
IDLE = {"waiting": 0, "kv_cache_usage": 0.1}
SATURATED = {"waiting": 9, "kv_cache_usage": 0.95}


@pytest.fixture
def config_file(tmp_path: Path) -> Path:
    path = tmp_path / "epp-config.yaml"
    path.write_text(OUR_CONFIG)
    return path


async def test_least_loaded_pod_canary_split_and_batch_shedding(epp_pool: PoolFactory, config_file: Path) -> None:
    pool = await epp_pool("v1", pool=POOL, pods=3, objects=OUR_OBJECTS, picker_args=["--config-file", str(config_file)])
    assert POOL in await pool.cluster.kubectl("get", "inferencepools")  # the real kubectl sees our objects

    await pool.set_pins([BUSY, IDLE, BUSY])  # what each simulated vLLM reports on /metrics
    routed = await pool.route({"model": "llama", "prompt": "hello"}, headers={"x-gateway-inference-objective": "batch"})
    assert routed.status == 200 and routed.endpoint == pool.hostport(1)
    assert json.loads(routed.body)["model"] in {"llama-3-8b", "llama-3-8b-ft"}  # our canary rewrite

    await pool.set_pins([SATURATED] * 3)
    shed = await pool.route({"model": "llama", "prompt": "later"}, headers={"x-gateway-inference-objective": "batch"})
    assert shed.status == 429  # batch work is shed when every pod is saturated...
    kept = await pool.route(
        {"model": "llama", "prompt": "now"}, headers={"x-gateway-inference-objective": "interactive"}
    )
    assert kept.status == 200  # ...interactive work is not


async def test_through_a_real_envoy(epp_pool: PoolFactory, config_file: Path) -> None:
    pool = await epp_pool("v1", pool=POOL, pods=2, objects=OUR_OBJECTS, sim_config=OUR_SERVERS, envoy=True)
    chat = {"model": "llama", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    async with aiohttp.ClientSession() as http, http.post(f"{pool.envoy_url}/v1/chat/completions", json=chat) as resp:
        answer = await resp.json()
    assert resp.status == 200 and answer["model"] == "llama"  # the client sees the name it asked for
    served = [server.stats()["last_model"] for server in pool.servers if server.stats()["requests"]]
    assert served in (["llama-3-8b"], ["llama-3-8b-ft"])  # one pod served it, under the rewritten name
