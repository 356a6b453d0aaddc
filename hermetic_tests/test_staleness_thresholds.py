"""Two staleness thresholds, as upstream: the flag for the picker's own view, the detector's for admission.

``--metrics-staleness-threshold`` decides what the Endpoints API calls stale, what
``inference_pool_ready_pods`` counts and which endpoints are served first; the
``utilization-detector``'s ``metricsStalenessThreshold`` (200 ms unless configured) decides
whether sheddable work is admitted. Each case stops the pool's scrapers over idle pods, so the
endpoints' metrics only age, and shows one threshold crossed while the other is not. Objectives
(the sheddable priority) exist only in the modes with a pool object.
"""

from __future__ import annotations

import aiohttp
import grpc
import pytest
from pool_modes import CRD_MODES, POOL, served

from epp.api import pb
from epp_sim.kube_objects import PoolMode, inference_objective
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

IDLE = {"waiting": 0, "kv_cache_usage": 0.0}
BATCH = {"x-gateway-inference-objective": "batch"}  # priority -1: sheddable
LENIENT_DETECTOR = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- {type: utilization-detector, parameters: {metricsStalenessThreshold: 1h}}
schedulingProfiles:
- {name: default, plugins: [{pluginRef: queue-scorer}]}
"""


async def idle_pool_aging(epp_pool: PoolFactory, mode: PoolMode, *args: str) -> HermeticPool:
    """Two idle pods, scraped once more and then never again."""
    objects = [*served(mode, "m"), inference_objective("batch", -1, POOL, mode=mode)]
    env = await epp_pool(mode, pods=2, objects=objects, picker_args=list(args))
    await env.set_pins([IDLE, IDLE])
    await env.runtime.pools[0].scrapers.stop()
    return env


def youngest_age(env: HermeticPool) -> float:
    now = env.runtime.clock.now()
    return min(s.metrics.age(now) for s in env.endpoints())


async def pool_gauge(env: HermeticPool, name: str) -> float | None:
    """An ``inference_pool_*`` gauge as a scrape of ``/metrics`` sees it (the scrape refreshes them)."""
    async with aiohttp.ClientSession() as http, http.get(env.picker.metrics_url) as resp:
        assert resp.status == 200
    return env.runtime.metrics.registry.get_sample_value(name, {"name": POOL})


async def listed_stale(env: HermeticPool) -> list[bool]:
    async with grpc.aio.insecure_channel(env.picker.health_target) as channel:
        listing = await pb.EndpointsStub(channel).ListEndpoints(pb.ListEndpointsRequest(), timeout=10)
    (pool,) = listing.pools
    return [e.metrics_stale for e in pool.endpoints]


@pytest.mark.parametrize("mode", CRD_MODES)
async def test_the_flag_does_not_change_admission(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await idle_pool_aging(epp_pool, mode, "--metrics-staleness-threshold", "1h")
    await wait_until(lambda: youngest_age(env) > 0.2, message="metrics older than the detector's 200 ms")
    assert await listed_stale(env) == [False, False]  # fresh by the flag's hour
    assert await pool_gauge(env, "inference_pool_ready_pods") == 2
    shed = await env.route({"model": "m", "prompt": "batch work"}, headers=BATCH)
    assert shed.status == 429  # idle pods, but stale to the detector: saturated, as upstream
    assert (await env.route({"model": "m", "prompt": "interactive"})).status == 200  # never shed


@pytest.mark.parametrize("mode", CRD_MODES)
async def test_the_detector_parameter_does_not_change_the_picker_view(epp_pool: PoolFactory, mode: PoolMode) -> None:
    args = ("--metrics-staleness-threshold", "50ms", "--config-text", LENIENT_DETECTOR)
    env = await idle_pool_aging(epp_pool, mode, *args)
    await wait_until(lambda: youngest_age(env) > 0.05, message="metrics older than the flag's 50 ms")
    assert await listed_stale(env) == [True, True]
    assert await pool_gauge(env, "inference_pool_ready_pods") == 0
    assert await pool_gauge(env, "inference_pool_average_queue_size") == 0  # no fresh endpoint to average
    routed = await env.route({"model": "m", "prompt": "batch work"}, headers=BATCH)
    assert routed.status == 200  # fresh by the detector's hour: admitted (to a stale endpoint: none is fresh)
