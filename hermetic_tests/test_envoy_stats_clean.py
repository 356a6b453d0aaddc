"""Envoy's own view stays clean while the picker ends each ext_proc RPC from its side (issue 12).

The picker sends its final status as soon as an exchange is complete, before Envoy would reset
the stream. Envoy must see that as a normal end, never as a failed or timed-out stream, in
every shape of exchange: both body modes, header-only requests, immediate responses (a refused
body), streamed answers; behind a stock Envoy (it resets finished streams) and one with the
graceful-close runtime guard (it half-closes and waits for the picker).
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from epp_sim.modelserver.config import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.envoy import EnvoyProcess, ext_proc_problems
from epp_sim.stack.envoy_config import BodyMode, ExtProcTarget, envoy_bootstrap

MODEL = SimConfig().model
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi " * 300}], "max_tokens": 4}


async def _exchanges(http: aiohttp.ClientSession, url: str) -> None:
    """One of each exchange shape; each must reach the client with the expected status."""
    async with http.post(f"{url}/v1/chat/completions", json=CHAT) as resp:
        assert resp.status == 200, await resp.text()
        assert (await resp.json())["model"] == MODEL
    streamed = {**CHAT, "stream": True}
    async with http.post(f"{url}/v1/chat/completions", json=streamed) as resp:
        assert resp.status == 200
        assert (await resp.read()).rstrip().endswith(b"data: [DONE]")
    async with http.get(f"{url}/v1/models") as resp:  # no body: routed at the headers phase
        assert resp.status == 200
    async with http.post(f"{url}/v1/completions", data=b'{"model": "x", "prompt": ') as resp:
        assert resp.status == 400  # an immediate response from the picker
        assert "error unmarshaling request body" in await resp.text()


@pytest.mark.parametrize("body_mode", ["FULL_DUPLEX_STREAMED", "BUFFERED"])
async def test_no_ext_proc_problem_in_envoy_stats(epp_pool: PoolFactory, tmp_path: Path, body_mode: BodyMode) -> None:
    pool = await epp_pool("v1", pods=2, envoy=False)
    host, _, port = pool.picker.grpc_target.rpartition(":")
    async with AsyncExitStack() as stack, aiohttp.ClientSession() as http:
        for graceful in (False, True):
            bootstrap = envoy_bootstrap(
                listen_port=0,
                ext_proc=ExtProcTarget(host, int(port)),
                admin_port=0,
                request_body_mode=body_mode,
                response_body_mode=body_mode,
                graceful_ext_proc_close=graceful,
            )
            name = f"envoy-{'graceful' if graceful else 'stock'}"
            envoy = await stack.enter_async_context(EnvoyProcess(bootstrap, name=name, work_dir=tmp_path / name))
            await envoy.wait_ext_proc_healthy(timeout=30)
            for _ in range(5):
                await _exchanges(http, f"http://127.0.0.1:{envoy.port}")
            assert ext_proc_problems(await envoy.counters()) == {}, name
