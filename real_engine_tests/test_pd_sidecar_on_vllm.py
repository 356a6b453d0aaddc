"""``epp sidecar`` between two real vLLM engines moving a prompt's KV cache with a real KV connector.

Both of the sidecar's protocols, each over the vLLM connector it drives, on vLLM's CPU build:

- ``shared-storage``: ``ExampleConnector`` (vLLM's reference connector, formerly
  ``SharedStorageConnector``): the prefill engine writes each layer's KV of the prompt's full
  blocks to a shared directory; the decode engine, meeting the same prompt, loads it;
- ``nixlv2``: ``NixlConnector`` with ``kv_buffer_device: cpu`` over NIXL's UCX backend
  (``provision_nixl`` puts PyPI's NIXL on the engines' ``PYTHONPATH``): the prefill answers with
  ``kv_transfer_params`` naming its engine and blocks, and the decode engine pulls them.

Per protocol, two engines with the connector (the session fleet is stopped first: four engines
do not fit two cores) and the sidecar in front of the decode engine. A long prompt sent with
``x-prefiller-host-port`` is computed by the prefill engine (its ``vllm:prompt_tokens`` grow)
and its KV loaded by the decode engine (``vllm:external_prefix_cache_hits`` grow), JSON and SSE;
a dead prefiller is retried and then prefilled locally by the decode engine.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from engine_load import engine_counter

from epp.sidecar.server import Sidecar
from epp_sim.ports import common_free_port, free_port
from epp_sim.realengine.provision import provision_nixl
from epp_sim.realengine.servers import MODEL, VllmFleet, VllmServer
from epp_sim.stack.sidecars import sidecar_for

pytestmark = [pytest.mark.real_engine, pytest.mark.asyncio(loop_scope="session")]  # the sidecar serves on that loop

_NO_EVENTS = {"enable_kv_cache_events": False}
_BLOCK = 128  # vLLM's CPU block size: the connector moves full blocks only


def _prompt(topic: str) -> str:
    """~800 tokens no earlier request started with (so no engine holds any of it)."""
    return f"{topic}: " + " ".join(f"Line {i} of the {topic} report says the figures rose again." for i in range(60))


_TRANSFER = {
    "shared-storage": {"kv_connector": "ExampleConnector", "kv_role": "kv_both"},
    "nixlv2": {"kv_connector": "NixlConnector", "kv_role": "kv_both", "kv_buffer_device": "cpu"},
}
"""The sidecar's ``--kv-connector`` → the engines' ``--kv-transfer-config``."""


@pytest_asyncio.fixture(scope="module", loop_scope="session", params=sorted(_TRANSFER))
async def pd_pod(
    request: pytest.FixtureRequest, _epp_vllm_fleet: VllmFleet, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[VllmServer, VllmServer, Sidecar]]:
    """(prefill engine, decode engine, the decode pod's sidecar) for one protocol."""
    protocol: str = request.param
    await _epp_vllm_fleet.stop()  # this module runs last (conftest); the fleet would restart if asked
    install = _epp_vllm_fleet.install
    tmp_path = tmp_path_factory.mktemp(protocol)
    transfer: dict[str, object] = dict(_TRANSFER[protocol])
    env: dict[str, str] = {}
    if protocol == "nixlv2":
        env["PYTHONPATH"] = str(await provision_nixl(install))
    else:
        transfer["kv_connector_extra_config"] = {"shared_storage_path": str(tmp_path)}
    hosts = ["127.0.0.230", "127.0.0.231"]
    port = common_free_port(hosts)
    side_channel = common_free_port(hosts)
    prefill, decode = (
        VllmServer(
            install,
            name=f"vllm-{role}",
            host=host,
            port=port,
            log_path=tmp_path / f"vllm-{role}.log",
            extra_args=("--kv-transfer-config", json.dumps(transfer)),
            extra_env={**env, "VLLM_NIXL_SIDE_CHANNEL_HOST": host, "VLLM_NIXL_SIDE_CHANNEL_PORT": str(side_channel)},
        )
        for role, host in zip(("prefill", "decode"), hosts, strict=True)
    )
    try:
        for server in (prefill, decode):
            await server.start(_NO_EVENTS)
        for server in (prefill, decode):
            await server.wait_ready()
        args = (f"--kv-connector={protocol}", "--prefill-max-retries=1", "--prefill-retry-backoff=10ms")
        async with sidecar_for(decode.host, free_port(decode.host), port, 1, args) as sidecar:
            yield prefill, decode, sidecar
    finally:
        await prefill.stop()
        await decode.stop()


def _url(sidecar: Sidecar) -> str:
    return f"http://{sidecar.options.bind_address}:{sidecar.ports[0]}/v1/completions"


def _sidecar_sample(sidecar: Sidecar, name: str, **labels: str) -> float:
    return sidecar.metrics.registry.get_sample_value(name, labels) or 0.0


async def test_the_prefill_engine_computes_the_prompt_and_the_decode_engine_loads_its_kv(
    pd_pod: tuple[VllmServer, VllmServer, Sidecar],
) -> None:
    prefill, decode, sidecar = pd_pod
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        for stream in (False, True):
            prompt = _prompt("streamed" if stream else "quarterly")
            computed = await engine_counter(http, prefill, "vllm:prompt_tokens_total")
            loaded = await engine_counter(http, decode, "vllm:external_prefix_cache_hits_total")
            body = {"model": MODEL, "prompt": prompt, "max_tokens": 8, "temperature": 0, "stream": stream}
            headers = {"x-prefiller-host-port": prefill.hostport}
            async with http.post(_url(sidecar), json=body, headers=headers) as resp:
                assert resp.status == 200, await resp.text()
                text = await resp.text()
            if stream:
                events = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
                assert events[-1] == "[DONE]"
                answer = "".join(json.loads(e)["choices"][0]["text"] for e in events[:-1] if json.loads(e)["choices"])
            else:
                reply = json.loads(text)
                answer = reply["choices"][0]["text"]
                prompt_tokens = reply["usage"]["prompt_tokens"]
                assert prompt_tokens > 4 * _BLOCK
            assert answer.strip()
            assert await engine_counter(http, prefill, "vllm:prompt_tokens_total") > computed + 4 * _BLOCK
            pulled = await engine_counter(http, decode, "vllm:external_prefix_cache_hits_total") - loaded
            assert pulled >= 4 * _BLOCK, f"the decode engine loaded {pulled} tokens of KV"
    assert _sidecar_sample(sidecar, "epp_sidecar_requests_total", path="/v1/completions", route="prefill-decode") == 2
    assert _sidecar_sample(sidecar, "epp_sidecar_prefill_duration_seconds_count", outcome="ok") == 2


async def test_a_dead_prefiller_is_retried_then_the_decode_engine_prefills(
    pd_pod: tuple[VllmServer, VllmServer, Sidecar],
) -> None:
    _, decode, sidecar = pd_pod
    dead = f"{decode.host}:{free_port(decode.host)}"  # nothing listens there
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=600)) as http:
        computed = await engine_counter(http, decode, "vllm:prompt_tokens_total")
        body = {"model": MODEL, "prompt": _prompt("fallback"), "max_tokens": 4}
        async with http.post(_url(sidecar), json=body, headers={"x-prefiller-host-port": dead}) as resp:
            assert resp.status == 200, await resp.text()
            assert (await resp.json())["choices"][0]["text"]
        assert await engine_counter(http, decode, "vllm:prompt_tokens_total") > computed + 4 * _BLOCK
    assert _sidecar_sample(sidecar, "epp_sidecar_local_prefill_fallbacks_total") == 1
    assert _sidecar_sample(sidecar, "epp_sidecar_prefill_retries_total") == 1
