"""The GIE conformance suite's hooks through a real Envoy, as GatewayFollowingEPPRouting and
GatewayDestinationEndpointServed use them: ``test-epp-endpoint-selection`` steers, the served
endpoint comes back in ``x-conformance-test-served-endpoint``."""

from __future__ import annotations

import aiohttp
import pytest
from pool_modes import ALL_MODES, served

from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver.config import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool

SELECTION = "test-epp-endpoint-selection"
SERVED = "x-conformance-test-served-endpoint"
MODEL = "conformance-fake-model"
BODY = {"model": MODEL, "prompt": "Write as if you were a critic: San Francisco", "max_tokens": 1}


def requests_per_pod(env: HermeticPool) -> list[int]:
    return [int(sim.stats()["requests"]) for sim in env.servers]


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_endpoint_selection_and_served_endpoint_echo(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(
        mode,
        pods=3,
        sim_config=SimConfig(model=MODEL),
        objects=served(mode, MODEL),
        envoy=True,
        picker_args=["--enable-conformance-test-hooks"],
    )
    url = f"{env.envoy_url}/v1/completions"
    async with aiohttp.ClientSession() as http:

        async def post(**headers: str) -> aiohttp.ClientResponse:
            async with http.post(url, json=BODY, headers=headers) as resp:
                await resp.read()
                return resp

        for i, pod in enumerate(env.pods):  # one designated pod: it serves, and says so
            before = requests_per_pod(env)
            resp = await post(**{SELECTION: pod.ip})
            assert resp.status == 200
            assert resp.headers[SERVED] == env.hostport(i)
            assert [a - b for a, b in zip(requests_per_pod(env), before, strict=True)] == [
                int(j == i) for j in range(3)
            ]

        before = requests_per_pod(env)
        two = f"{env.pods[0].ip},{env.pods[1].ip}"
        echoed = [(await post(**{SELECTION: two})).headers[SERVED] for _ in range(6)]
        assert sorted(echoed) == sorted([env.hostport(0), env.hostport(1)] * 3)  # round-robin over the two
        assert [a - b for a, b in zip(requests_per_pod(env), before, strict=True)] == [3, 3, 0]

        unscheduled = await post()  # no header: scheduled as usual, still echoed
        assert unscheduled.status == 200 and unscheduled.headers[SERVED] in {env.hostport(i) for i in range(3)}
        nobody = await post(**{SELECTION: "10.9.9.9"})
        assert nobody.status == 503
