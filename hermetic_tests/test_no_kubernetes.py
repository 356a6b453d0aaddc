"""`epp serve` with no Kubernetes at all: endpoints from a file (file-discovery), routed through a real Envoy.

The smallest deployment: a picker, an Envoy and model servers on one machine. The picker is given
a configuration whose ``dataLayer.discovery`` names a ``file-discovery`` plugin, no ``--pool-name``
and a kubeconfig that does not exist, so any call to an API server would fail its start. It routes
to the servers the file lists, follows the file as it changes (a server added, one removed, a
broken edit ignored), and serves /metrics for the pool ``epp``, as upstream's file-discovery mode.
"""

from __future__ import annotations

from collections import Counter
from contextlib import AsyncExitStack
from pathlib import Path

import aiohttp
import pytest

from epp.config.options import OptionsError
from epp.framework.discovery import DiscoveryError
from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.pytest_plugin import EnvoyFactory
from epp_sim.stack.discovery import discovery_config, endpoints_file
from epp_sim.stack.envoy import ext_proc_problems
from epp_sim.stack.picker import InProcessPicker
from epp_sim.waits import wait_until

MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def endpoints(servers: list[ModelServer]) -> str:
    return endpoints_file((f"vllm-{i}", s.host, s.port) for i, s in enumerate(servers))


async def test_a_picker_without_kubernetes_routes_to_the_files_endpoints(
    epp_envoy: EnvoyFactory, tmp_path: Path
) -> None:
    async with AsyncExitStack() as stack:
        servers = [
            await stack.enter_async_context(ModelServer(SimConfig(model=MODEL), host=f"127.0.0.{2 + i}"))
            for i in range(3)
        ]
        path = tmp_path / "endpoints.yaml"
        path.write_text(endpoints(servers[:2]))
        picker = InProcessPicker(["--config-text", discovery_config(path)], kubeconfig=tmp_path / "no-cluster")
        await stack.enter_async_context(picker)
        await picker.wait_routing("epp", 2)
        (pool,) = picker.runtime.pools
        assert pool.key == ("default", "epp")
        envoy = await epp_envoy(picker)
        url = f"http://127.0.0.1:{envoy.port}/v1/completions"

        async with aiohttp.ClientSession() as http:

            async def served(count: int) -> Counter[str]:
                before = {s.host: s.stats()["requests"] for s in servers}
                for i in range(count):
                    body = {"model": MODEL, "prompt": f"request {i} " * 20, "max_tokens": 1}
                    async with http.post(url, json=body) as resp:
                        assert resp.status == 200, await resp.text()
                return Counter({s.host: s.stats()["requests"] - before[s.host] for s in servers})

            first = await served(12)
            assert first[servers[2].host] == 0 and first[servers[0].host] + first[servers[1].host] == 12

            # The file changes: the first server leaves, the third joins.
            path.write_text(endpoints(servers[1:]))
            keys = lambda: [s.endpoint.key for s in pool.datastore.endpoints()]  # noqa: E731
            await wait_until(
                lambda: (
                    keys() == ["default/vllm-0", "default/vllm-1"]
                    and _hosts(pool) == {servers[1].host, servers[2].host}
                )
            )
            await picker.wait_routing("epp", 2)
            second = await served(12)
            assert second[servers[0].host] == 0 and second[servers[1].host] + second[servers[2].host] == 12

            # A broken edit is logged and ignored: the picker keeps routing to the last good set.
            path.write_text("endpoints: [")
            plugin = pool.reconciler.discovery  # type: ignore[union-attr]
            await wait_until(lambda: "parsing" in plugin.last_error, message="the broken file polled")
            third = await served(6)
            assert third[servers[0].host] == 0 and sum(third.values()) == 6

        assert ext_proc_problems(await envoy.counters()) == {}


def _hosts(pool: object) -> set[str]:
    return {s.endpoint.address for s in pool.datastore.endpoints()}  # type: ignore[attr-defined]


async def test_what_needs_an_api_server_is_refused_and_an_unreadable_file_fails_the_start(tmp_path: Path) -> None:
    config = discovery_config(tmp_path / "absent.yaml")
    picker = InProcessPicker(["--config-text", config], kubeconfig=tmp_path / "no-cluster")
    with pytest.raises(DiscoveryError, match=r"reading .*absent\.yaml"):
        await picker.start()
    await picker.stop()
    for flag, named in (
        ("--ha-enable-leader-election", "--ha-enable-leader-election holds a Lease"),
        ("--metrics-endpoint-auth=true", "--metrics-endpoint-auth checks tokens with the API server"),
    ):
        picker = InProcessPicker(["--config-text", config, flag], kubeconfig=tmp_path / "no-cluster")
        with pytest.raises(OptionsError, match=f"dataLayer.discovery runs the picker without Kubernetes; {named}"):
            await picker.start()
        await picker.stop()
