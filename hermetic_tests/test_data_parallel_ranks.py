"""Data-parallel ranks through a real Envoy: the rank the picker chose is the engine that serves.

Each pod serves three ranks on consecutive ports, an engine each; the pool lists every rank's port
(v1 and standalone: a v1alpha2 pool has one target port). With the default handler the gateway goes
straight to the chosen rank's port. With the deprecated ``data-parallel-profile-handler`` the pods
run ``epp sidecar --data-parallel-size=3``: the gateway goes to the pod's first port, the rank
travels in ``x-data-parallel-host-port``, and the sidecar hands the request to that rank's engine.
"""

from __future__ import annotations

from pathlib import Path

import aiohttp
import pytest

from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

MODES: tuple[PoolMode, ...] = ("v1", "standalone")
SIM = SimConfig(model="m", time_scale=10.0)
RANKS = 3
DP_CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: data-parallel-profile-handler
  parameters: {{primaryPort: {port}}}
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: queue-scorer}}]
"""


async def busy_except(env: HermeticPool, idle: tuple[int, int]) -> None:
    """Every rank of every pod reports a queue, but rank ``idle[1]`` of pod ``idle[0]``; wait for the scrape."""
    expected: dict[str, int] = {}
    for p, pod in enumerate(env.pods):
        for r, server in enumerate(pod.servers):
            waiting = 0 if (p, r) == idle else 4
            server.pin(waiting=waiting)
            expected[pod.addresses[r]] = waiting

    def scraped() -> bool:
        seen = {s.endpoint.hostport: s.metrics.waiting_queue for s in env.endpoints() if s.metrics.updated_at}
        return all(seen.get(address) == waiting for address, waiting in expected.items())

    await wait_until(scraped, timeout=10, message=f"picker scraped {expected}")


async def ask(env: HermeticPool, prompt: str = "which rank?") -> None:
    """One request; a new ``prompt`` each time, so no prefix affinity pulls it to the last rank."""
    async with aiohttp.ClientSession() as http:
        body = {"model": "m", "prompt": prompt, "max_tokens": 2}
        async with http.post(f"{env.envoy_url}/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()


def served(env: HermeticPool) -> list[list[int]]:
    return [[server.stats()["requests"] for server in pod.servers] for pod in env.pods]


@pytest.mark.parametrize("mode", MODES)
async def test_the_gateway_goes_to_the_chosen_ranks_port(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=2, ranks=RANKS, sim_config=SIM, envoy=True)
    assert len(env.endpoints()) == 2 * RANKS  # one endpoint per (pod, rank)
    await busy_except(env, (1, 2))
    await ask(env)
    assert served(env) == [[0, 0, 0], [0, 0, 1]]
    await busy_except(env, (0, 1))
    await ask(env, "and now which rank?")
    assert served(env) == [[0, 1, 0], [0, 0, 1]]


@pytest.mark.parametrize("mode", MODES)
async def test_a_primary_port_and_the_rank_header(epp_pool: PoolFactory, mode: PoolMode, tmp_path: Path) -> None:
    config = tmp_path / "epp-config.yaml"
    config.write_text(DP_CONFIG.format(port=8000))  # rewritten below, once the pool's ports are known
    env = await epp_pool(
        mode,
        pods=2,
        ranks=RANKS,
        roles=("decode", "decode"),
        sidecar_args=[],
        sim_config=SIM,
        envoy=True,
        picker_args=["--config-file", str(config)],
    )
    config.write_text(DP_CONFIG.format(port=env.port))
    routing = env.runtime.pools[0].routing
    await wait_until(
        lambda: getattr(routing.config.scheduler.profile_handler, "port", None) == env.port,
        timeout=10,
        message="the picker reloaded the data-parallel configuration",
    )
    await busy_except(env, (0, 2))
    await ask(env)
    assert served(env) == [[0, 0, 1], [0, 0, 0]]  # rank 2's engine, reached through the pod's first port
    sidecar = env.pods[0].sidecar
    assert sidecar is not None
    routed = sidecar.metrics.registry.get_sample_value(
        "epp_sidecar_requests_total", {"path": "/v1/completions", "route": "data-parallel"}
    )
    assert routed == 1
