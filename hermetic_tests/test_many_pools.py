"""Two pools in one picker: each request goes to its own pool, and a saturated pool affects no other."""

from __future__ import annotations

import json
import random

import grpc
from harness import CRDS, Env, picker_options
from kube_rest import KubeRest

from epp.runtime import Runtime
from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.modelserver.fixture import model_servers
from epp_sim.ports import free_port
from epp_sim.waits import wait_until

SHEDDABLE = "x-gateway-inference-objective"


def pool(name: str, port: int) -> dict[str, object]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "targetPorts": [{"number": port}],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
        },
    }


def objective(pool_name: str) -> dict[str, object]:
    return {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {"name": f"batch-{pool_name}", "namespace": "default"},
        "spec": {"priority": -1, "poolRef": {"name": pool_name}},
    }


async def test_two_pools_are_isolated() -> None:
    port = free_port("127.0.0.2")
    async with running_apiserver() as api, KubeRest(api.url) as kube, model_servers(4, port=port) as sims:
        await kube.apply_crds(CRDS)
        for name in ("pool-a", "pool-b"):
            await kube.create(pool(name, port))
            await kube.create(objective(name))
        for i, sim in enumerate(sims):
            await kube.create_ready_pod(f"pod-{i}", sim.host, {"app": "pool-a" if i < 2 else "pool-b"})
        options = picker_options(api.kubeconfig, pool_names=("pool-a", "pool-b"))
        async with Runtime(options, rng=random.Random(3), readiness_interval=0.02) as runtime:
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{runtime.ports.grpc}")
            env = Env(api, kube, runtime, list(sims), channel, "v1")
            try:
                a, b = runtime.pools
                hosts_a = {f"{s.host}:{port}" for s in sims[:2]}
                hosts_b = {f"{s.host}:{port}" for s in sims[2:]}
                await wait_until(
                    lambda: (
                        runtime.ready
                        and {e.endpoint.hostport for e in a.datastore.endpoints()} == hosts_a
                        and {e.endpoint.hostport for e in b.datastore.endpoints()} == hosts_b
                    ),
                    timeout=15,
                )
                # Saturate pool A only.
                for sim in sims[:2]:
                    sim.pin(waiting=20, kv_cache_usage=0.95)
                await wait_until(
                    lambda: all(e.metrics.waiting_queue == 20 for e in a.datastore.endpoints()), timeout=10
                )

                body = {"model": "m", "prompt": "p"}
                for _ in range(6):
                    routed_b = await env.route(
                        body, headers={"x-gateway-inference-pool": "pool-b", SHEDDABLE: "batch-pool-b"}
                    )
                    assert routed_b.status == 200 and routed_b.endpoint in hosts_b
                    routed_a = await env.route(body, headers={"x-gateway-inference-pool": "default/pool-a"})
                    assert routed_a.status == 200 and routed_a.endpoint in hosts_a
                shed = await env.route(body, headers={"x-gateway-inference-pool": "pool-a", SHEDDABLE: "batch-pool-a"})
                assert shed.status == 429  # pool A is saturated; its sheddable work is shed...
                kept = await env.route(body, headers={"x-gateway-inference-pool": "pool-b", SHEDDABLE: "batch-pool-b"})
                assert kept.status == 200  # ...while pool B's is not
                default = await env.route(body)
                assert default.endpoint in hosts_a  # no header: the first pool
                unknown = await env.route(body, headers={"x-gateway-inference-pool": "pool-z"})
                assert unknown.status == 404
                assert unknown.error == b"inference error: NotFound - unknown inference pool 'pool-z'"
                assert json.loads(routed_b.body) == body
            finally:
                await channel.close()
