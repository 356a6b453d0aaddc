"""A real vLLM killed under the picker: the health state machine takes it out, Envoy's traffic goes to the other.

The server is SIGKILLed (its whole process group, as the OOM killer would); the picker's next
scrape is refused, so the endpoint is unreachable (or ejected, if requests failed there first),
and every request sent through Envoy afterwards is answered by the surviving server. The fleet
restarts the killed server before any later test needs it.
"""

from __future__ import annotations

import aiohttp
from engine_load import served_requests

from epp.framework.health import Health
from epp_sim.pytest_plugin import VllmPoolFactory
from epp_sim.realengine.servers import MODEL
from epp_sim.waits import wait_until

AFTER = 6


async def test_a_killed_server_is_taken_out_and_the_other_serves(epp_vllm_pool: VllmPoolFactory) -> None:
    pool = await epp_vllm_pool()
    survivor, victim = pool.servers
    assert pool.state(victim).health.state is Health.HEALTHY
    victim.kill()
    await wait_until(
        lambda: pool.state(victim).health.state in (Health.UNREACHABLE, Health.EJECTED),
        timeout=10,
        message="the killed server taken out of rotation",
    )
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        before = await served_requests(http, survivor)
        for i in range(AFTER):
            body = {"model": MODEL, "prompt": f"Request {i} after the crash:", "max_tokens": 1}
            async with http.post(f"{pool.envoy_url}/v1/completions", json=body) as resp:
                assert resp.status == 200, await resp.text()
        assert await served_requests(http, survivor) == before + AFTER
    assert pool.state(victim).health.state in (Health.UNREACHABLE, Health.EJECTED)
