"""The example plugins in the real picker, through a real Envoy: installed with pip, named by the configuration.

The fixtures come from epp-sim's pytest plugin: ``epp_pool`` starts a fake Kubernetes API server,
simulated vLLM pods, ``epp serve`` with our configuration and, with ``envoy=True``, Envoy in front.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

import aiohttp
import pytest
from epp_zone_example import create_custom_metric_scorer, create_zone_affinity_filter

from epp.plugin_api import CycleState, Endpoint, EndpointState, InferenceRequest, MetricsSnapshot, PluginContext
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

MODEL = "acme-7b"
ZONE = "topology.kubernetes.io/zone"
ZONED = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: zone-affinity-filter
  parameters: {zone: zone-a}
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: zone-affinity-filter
  - pluginRef: queue-scorer
"""
METERED = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: custom-metric-scorer
  parameters: {attribute: acme.power}
- type: core-metrics-extractor
  parameters:
    engineConfigs:
    - name: vllm
      queuedRequestsSpec: vllm:num_requests_waiting
      runningRequestsSpec: vllm:num_requests_running
      kvUsageSpec: vllm:kv_cache_usage_perc
      customMetrics:
      - {attributeKey: acme.power, metricSpec: acme_gpu_power_watts}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: custom-metric-scorer
"""


def pod(index: int, zone: str, power: float | None = None) -> EndpointState:
    """A candidate as plugins see it, built without a picker (for the quick tests)."""
    endpoint = Endpoint("default", f"pod-{index}-rank-0", f"pod-{index}", f"10.0.0.{index}", 8000, labels={ZONE: zone})
    custom = {} if power is None else {"acme.power": power}
    return EndpointState(endpoint, MetricsSnapshot(custom=MappingProxyType(custom)))


def names(states: list[EndpointState]) -> list[str]:
    return [s.endpoint.pod_name for s in states]


def test_the_plugins_alone() -> None:
    pods = [pod(0, "zone-a", 410.0), pod(1, "zone-a"), pod(2, "zone-b", 120.0)]
    cycle, context = CycleState(), PluginContext()
    zoned = create_zone_affinity_filter("zone", {"zone": "zone-a"}, context)
    assert names(zoned.filter(cycle, InferenceRequest("r"), pods)) == ["pod-0", "pod-1"]
    elsewhere = InferenceRequest("r", headers={"x-client-zone": "zone-c"})
    assert names(zoned.filter(cycle, elsewhere, pods)) == ["pod-0", "pod-1", "pod-2"]
    strict = create_zone_affinity_filter("zone", {"zone": "zone-a", "strict": True}, context)
    assert strict.filter(cycle, elsewhere, pods) == []

    power = create_custom_metric_scorer("power", {"attribute": "acme.power"}, context)
    assert power.score(cycle, InferenceRequest("r"), pods) == [0.0, 0.0, 1.0]  # pod-1 has no reading: 0
    hungry = create_custom_metric_scorer("power", {"attribute": "acme.power", "lowerIsBetter": False}, context)
    assert hungry.score(cycle, InferenceRequest("r"), pods) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError, match=r"custom-metric-scorer\.parameters\.attribute: required"):
        create_custom_metric_scorer("power", {}, context)


async def served_by(pool: HermeticPool, headers: Mapping[str, str]) -> int:
    """Send one completion through Envoy; the index of the pod that served it."""
    before = [server.stats()["requests"] for server in pool.servers]
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{pool.envoy_url}/v1/completions", json=body, headers=dict(headers)) as resp,
    ):
        assert resp.status == 200, await resp.text()
    after = [server.stats()["requests"] for server in pool.servers]
    (index,) = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if b > a]
    return index


async def test_requests_stay_in_their_zone(epp_pool: PoolFactory) -> None:
    pool = await epp_pool(
        "v1", pods=3, sim_config=SimConfig(model=MODEL), picker_args=["--config-text", ZONED], envoy=True
    )
    await pool.label_pods([{ZONE: "zone-a"}, {ZONE: "zone-a"}, {ZONE: "zone-b"}])
    await pool.set_pins([{"waiting": 5}, {"waiting": 1}, {"waiting": 0}])  # zone-b's pod is the least loaded

    assert await served_by(pool, {}) == 1  # the picker's own zone, zone-a: its least-loaded pod
    assert await served_by(pool, {"x-client-zone": "zone-b"}) == 2
    assert await served_by(pool, {"x-client-zone": "zone-c"}) == 2  # no pod there: every pod may serve


async def test_the_pod_with_the_lowest_custom_metric_serves(epp_pool: PoolFactory) -> None:
    pool = await epp_pool(
        "v1", pods=3, sim_config=SimConfig(model=MODEL), picker_args=["--config-text", METERED], envoy=True
    )
    watts = [410.0, 120.0, 300.0]
    await pool.set_pins([{"gauges": {"acme_gpu_power_watts": w}} for w in watts])  # what each pod's /metrics says
    await wait_until(
        lambda: sorted(e.metrics.custom.get("acme.power", 0.0) for e in pool.endpoints()) == sorted(watts),
        timeout=10,
        message="the picker scraped every pod's power",
    )
    assert await served_by(pool, {}) == 1
