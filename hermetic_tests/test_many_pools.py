"""Two pools in one picker: each request goes to its own pool, and a saturated pool affects no other.

Built from the plugin's separate fixtures (cluster, simulated pods, picker, ext_proc client), as a
platform team would test a picker serving several pools.
"""

from __future__ import annotations

import json

import pytest
from pool_modes import CRD_MODES

from epp_sim.kube_objects import PoolMode, inference_model, inference_objective, inference_pool
from epp_sim.pytest_plugin import ClientFactory, PickerFactory, PodsFactory
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.manifests import CRDS_DIR
from epp_sim.stack.pool_spec import PoolSpec
from epp_sim.waits import wait_until

OBJECTIVE = "x-gateway-inference-objective"
POOL_HEADER = "x-gateway-inference-pool"


@pytest.mark.parametrize("mode", CRD_MODES)  # several pools need pool objects; standalone serves one
async def test_two_pools_are_isolated(
    epp_cluster: FakeCluster,
    epp_sim_pods: PodsFactory,
    epp_picker: PickerFactory,
    epp_extproc: ClientFactory,
    mode: PoolMode,
) -> None:
    await epp_cluster.apply_manifests(CRDS_DIR)
    pods = {name: await epp_sim_pods(2, labels={"app": name}, name_prefix=name) for name in ("pool-a", "pool-b")}
    for name, sims in pods.items():
        await epp_cluster.apply(inference_pool(mode, name, {"app": name}, sims.port))
        await epp_cluster.apply(inference_objective(f"batch-{name}", -1, name, mode=mode))
        if mode == "v1alpha2":
            await epp_cluster.apply(inference_model("m", name, name=f"m-{name}"))
    args = PoolSpec(name="pool-a", mode=mode).picker_arguments(0)
    picker = await epp_picker(*args, "--pool-name", "pool-b", "--refresh-metrics-interval=20ms", seed=3)
    client = await epp_extproc(picker)
    runtime = picker.runtime
    a, b = runtime.pools
    hosts_a, hosts_b = set(pods["pool-a"].addresses), set(pods["pool-b"].addresses)
    await wait_until(
        lambda: (
            runtime.ready
            and {e.endpoint.hostport for e in a.datastore.endpoints()} == hosts_a
            and {e.endpoint.hostport for e in b.datastore.endpoints()} == hosts_b
        ),
        timeout=15,
    )
    # Saturate pool A only.
    for pod in pods["pool-a"]:
        pod.server.pin(waiting=20, kv_cache_usage=0.95)
    await wait_until(lambda: all(e.metrics.waiting_queue == 20 for e in a.datastore.endpoints()), timeout=10)

    body = {"model": "m", "prompt": "p"}
    for _ in range(6):
        routed_b = await client.route(body, headers={POOL_HEADER: "pool-b", OBJECTIVE: "batch-pool-b"})
        assert routed_b.status == 200 and routed_b.endpoint in hosts_b
        routed_a = await client.route(body, headers={POOL_HEADER: "default/pool-a"})
        assert routed_a.status == 200 and routed_a.endpoint in hosts_a
    shed = await client.route(body, headers={POOL_HEADER: "pool-a", OBJECTIVE: "batch-pool-a"})
    assert shed.status == 429  # pool A is saturated; its sheddable work is shed...
    kept = await client.route(body, headers={POOL_HEADER: "pool-b", OBJECTIVE: "batch-pool-b"})
    assert kept.status == 200  # ...while pool B's is not
    default = await client.route(body)
    assert default.endpoint in hosts_a  # no header: the first pool
    unknown = await client.route(body, headers={POOL_HEADER: "pool-z"})
    assert unknown.status == 404
    assert unknown.error == b"inference error: NotFound - unknown inference pool 'pool-z'"
    assert json.loads(routed_b.body) == body
