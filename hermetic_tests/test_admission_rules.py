"""Admission rules end to end: the detector's ``aggregation``, and the v0.3 tree with no admission step."""

from __future__ import annotations

import pytest
from pool_modes import CRD_MODES, POOL, served

from epp_sim.kube_objects import PoolMode, inference_objective
from epp_sim.pytest_plugin import PoolFactory

SHED = b"inference error: ResourceExhausted - system saturated, sheddable request dropped"

# Staleness is judged at 2 s (default 200 ms) so a loaded CI machine cannot make a pod look stale.
DETECTOR = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: utilization-detector
  parameters: {{metricsStalenessThreshold: 2s{aggregation}}}
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}]
saturationDetector: {{pluginRef: utilization-detector}}
"""
V03 = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins: [{type: legacy-filter-tree}, {type: random-picker}]
"""


@pytest.mark.parametrize("mode", CRD_MODES)  # sheddable work is named by an InferenceObjective
@pytest.mark.parametrize(("aggregation", "routed"), [("", False), (", aggregation: minimum", True)])
async def test_one_idle_pod_beside_a_hot_one(
    epp_pool: PoolFactory, mode: PoolMode, aggregation: str, routed: bool
) -> None:
    """Utilisations 2.0 and 0.0: upstream's average is 1.0 (shed); ``minimum`` routes to the idle pod."""
    objects = [inference_objective("sheddable", -1, POOL, mode=mode), *served(mode, "m")]
    config = DETECTOR.format(aggregation=aggregation)
    env = await epp_pool(mode, pods=2, objects=objects, picker_args=["--config-text", config])
    await env.set_pins([{"waiting": 10, "kv_cache_usage": 0.0}, {"waiting": 0, "kv_cache_usage": 0.0}])
    answer = await env.route({"model": "m", "prompt": "p"}, headers={"x-gateway-inference-objective": "sheddable"})
    if routed:
        assert answer.endpoint == env.hostport(1)
    else:
        assert (answer.status, answer.error) == (429, SHED)
    standard = await env.route({"model": "m", "prompt": "p"})  # priority 0 is never shed
    assert standard.endpoint == env.hostport(1)


@pytest.mark.parametrize(("config", "status"), [("", 429), (V03, 200)], ids=["default", "v0.3"])
async def test_v03_routes_sheddable_work_at_queue_5(epp_pool: PoolFactory, config: str, status: int) -> None:
    """Every pod at queue 5: today's admission sheds (utilisation 1.0), v0.3's tree routed (q <= 5)."""
    args = ["--config-text", config] if config else []
    objects = served("v1alpha2", "m", criticality="Sheddable")
    env = await epp_pool("v1alpha2", pods=2, objects=objects, picker_args=args)
    await env.set_pins([{"waiting": 5, "kv_cache_usage": 0.5}] * 2)
    answer = await env.route({"model": "m", "prompt": "p"})
    assert answer.status == status, answer.error
    if status == 429:
        assert answer.error == SHED
    else:
        assert answer.endpoint in {env.hostport(0), env.hostport(1)}
        # One more waiting request than v0.3's capacity: its own tree drops the request.
        await env.set_pins([{"waiting": 6, "kv_cache_usage": 0.5}] * 2)
        dropped = await env.route({"model": "m", "prompt": "p"})
        assert dropped.status == 429
        assert dropped.error.startswith(b"inference error: ResourceExhausted - failed to find target endpoint")
