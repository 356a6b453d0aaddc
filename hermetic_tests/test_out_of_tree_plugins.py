"""Out-of-tree plugins in the running picker, through a real Envoy: contained when broken, reloaded, explained, timed.

The distributions are written to a directory on ``sys.path`` (``epp_sim.plugin_dists``), as
``pip install`` would leave them: the example distribution's own module (``examples/zone-plugins``)
and ``acme-broken``, whose scorers break their contract on purpose. The in-process picker discovers
both through the ``epp.plugins`` entry points.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import grpc
import pytest
from pool_modes import ALL_MODES, served

from epp.api import pb
from epp_sim.kube_objects import PoolMode
from epp_sim.modelserver import SimConfig
from epp_sim.plugin_dists import write_distribution
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "zone-plugins" / "src" / "epp_zone_example.py"
MODEL = "acme-7b"
POWER = "acme_gpu_power_watts"
HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
EXTRACTOR = """\
- type: core-metrics-extractor
  parameters:
    engineConfigs:
    - name: vllm
      queuedRequestsSpec: vllm:num_requests_waiting
      kvUsageSpec: vllm:kv_cache_usage_perc
      customMetrics: [{attributeKey: acme.power, metricSpec: acme_gpu_power_watts}]
"""

BROKEN = """
import threading
import time

from epp.plugin_api import NamedPlugin, PluginDefinition, PluginKind

ON_THE_MAIN_THREAD = threading.current_thread() is threading.main_thread()  # where the picker imported it


class Raising(NamedPlugin):
    plugin_type = "raising-scorer"
    kinds = frozenset({PluginKind.SCORER})

    def score(self, cycle, request, candidates):
        raise RuntimeError("model of the world not loaded")


class Wild(NamedPlugin):
    plugin_type = "wild-scorer"
    kinds = frozenset({PluginKind.SCORER})

    def score(self, cycle, request, candidates):
        if "x-slow" in request.headers:  # holds the event loop, as a blocking call in a scorer would
            until = time.perf_counter() + 0.15
            while time.perf_counter() < until:
                pass
        return [7.0] * len(candidates)


RAISING = PluginDefinition("raising-scorer", lambda name, parameters, context: Raising(name), api_version="1.0")
WILD = PluginDefinition("wild-scorer", lambda name, parameters, context: Wild(name), api_version="1.0")
"""


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The plugin distributions, installed into a directory on ``sys.path`` for this test only."""
    root = tmp_path / "site"
    write_distribution(
        root,
        "epp-zone-example",
        plugins={
            "zone-affinity-filter": "epp_zone_example:ZONE_AFFINITY_FILTER",
            "custom-metric-scorer": "epp_zone_example:CUSTOM_METRIC_SCORER",
        },
        modules={"epp_zone_example.py": EXAMPLE.read_text(encoding="utf-8")},
    )
    write_distribution(
        root,
        "acme-broken",
        plugins={
            "raising-scorer": "acme_broken:RAISING",
            "wild-scorer": "acme_broken:WILD",
            "gone-scorer": "acme_gone:DEFINITION",  # a module the distribution forgot to ship
        },
        modules={"acme_broken.py": BROKEN},
    )
    monkeypatch.syspath_prepend(str(root))
    yield root
    for module in ("acme_broken", "epp_zone_example"):
        sys.modules.pop(module, None)


async def completion(pool: HermeticPool, headers: Mapping[str, str] | None = None) -> int:
    """One completion through Envoy; the index of the pod that served it."""
    before = [server.stats()["requests"] for server in pool.servers]
    body = {"model": MODEL, "prompt": "hello", "max_tokens": 2}
    async with (
        aiohttp.ClientSession() as http,
        http.post(f"{pool.envoy_url}/v1/completions", json=body, headers=dict(headers or {})) as resp,
    ):
        assert resp.status == 200, await resp.text()
    after = [server.stats()["requests"] for server in pool.servers]
    (index,) = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if b > a]
    return index


def errors(pool: HermeticPool, plugin_type: str, reason: str) -> float:
    return pool.sample(
        "epp_plugin_errors_total",
        extension_point="Scorer",
        plugin_type=plugin_type,
        plugin_name=plugin_type,
        reason=reason,
    )


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_broken_scorers_are_contained_and_requests_still_routed(
    epp_pool: PoolFactory, site: Path, mode: PoolMode
) -> None:
    config = HEADER + (
        "plugins: [{type: queue-scorer}, {type: raising-scorer}, {type: wild-scorer}]\n"
        "schedulingProfiles:\n- name: default\n  plugins:\n"
        "  - {pluginRef: queue-scorer, weight: 1}\n"
        "  - {pluginRef: raising-scorer, weight: 5}\n"
        "  - {pluginRef: wild-scorer, weight: 1}\n"
    )
    pool = await epp_pool(
        mode,
        pods=3,
        objects=served(mode, MODEL),
        sim_config=SimConfig(model=MODEL),
        picker_args=["--config-text", config],
        envoy=True,
    )
    await pool.set_pins([{"waiting": 4}, {"waiting": 0}, {"waiting": 6}])
    for _ in range(3):  # the raising scorer adds nothing, the wild one 1.0 everywhere: queue decides
        assert await completion(pool) == 1
    assert errors(pool, "raising-scorer", "exception") == 3
    assert errors(pool, "wild-scorer", "out_of_range") == 3
    slow = errors(pool, "wild-scorer", "slow")  # a loaded machine may already have descheduled a call that long
    assert await completion(pool, {"x-slow": "1"}) == 1
    assert errors(pool, "wild-scorer", "slow") >= slow + 1  # 150 ms holding the loop: counted, still served


async def test_out_of_tree_scores_are_explained_and_timed_like_in_tree_ones(epp_pool: PoolFactory, site: Path) -> None:
    config = HEADER + "plugins:\n- type: custom-metric-scorer\n  parameters: {attribute: acme.power}\n"
    config += "- type: raising-scorer\n" + EXTRACTOR
    config += "schedulingProfiles:\n- name: default\n  plugins:\n"
    config += "  - {pluginRef: custom-metric-scorer}\n  - {pluginRef: raising-scorer}\n"
    pool = await epp_pool("v1", pods=3, sim_config=SimConfig(model=MODEL), picker_args=["--config-text", config])
    await scrape_power(pool, [410.0, 120.0, 300.0])
    async with grpc.aio.insecure_channel(pool.picker.health_target) as channel:
        request = pb.ExplainRequest(body=json.dumps({"model": MODEL, "prompt": "hi"}).encode())
        answer = await pb.ExplainStub(channel).Explain(request, timeout=10)
    (profile,) = answer.profiles
    assert [s.plugin for s in profile.scorers] == [
        "custom-metric-scorer/custom-metric-scorer",
        "raising-scorer/raising-scorer",
    ]
    raw = {e.address: [s.raw for s in e.scores][0] for e in profile.endpoints}
    assert raw == {pool.hostport(0): 0.0, pool.hostport(1): 1.0, pool.hostport(2): pytest.approx(110 / 290)}
    assert list(answer.picked) == [pool.hostport(1)]
    (failure,) = answer.plugin_failures
    assert (failure.plugin, failure.extension_point, failure.reason) == (
        "raising-scorer/raising-scorer",
        "Scorer",
        "exception",
    )
    assert errors(pool, "raising-scorer", "exception") == 0  # Explain counts nothing

    await pool.route({"model": MODEL, "prompt": "hi"})
    timed = "inference_extension_plugin_duration_seconds_count"
    labels = {"extension_point": "Scorer", "plugin_type": "custom-metric-scorer", "plugin_name": "custom-metric-scorer"}
    assert pool.sample(timed, **labels) == 1


async def scrape_power(pool: HermeticPool, watts: list[float]) -> None:
    await pool.set_pins([{"gauges": {POWER: w}} for w in watts])
    await wait_until(
        lambda: sorted(e.metrics.custom.get("acme.power", 0.0) for e in pool.endpoints()) == sorted(watts),
        timeout=10,
        message="the picker scraped every pod's power",
    )


def metered(parameters: dict[str, Any]) -> str:
    return (
        HEADER
        + f"plugins:\n- type: custom-metric-scorer\n  parameters: {json.dumps(parameters)}\n"
        + EXTRACTOR
        + "schedulingProfiles:\n- name: default\n  plugins: [{pluginRef: custom-metric-scorer}]\n"
    )


async def test_a_reload_swaps_an_out_of_tree_plugin_and_refuses_a_broken_one(
    epp_pool: PoolFactory, site: Path, tmp_path: Path
) -> None:
    path = tmp_path / "epp.yaml"
    path.write_text(metered({"attribute": "acme.power"}))
    pool = await epp_pool(
        "v1", pods=3, sim_config=SimConfig(model=MODEL), picker_args=["--config-file", str(path)], envoy=True
    )
    await scrape_power(pool, [410.0, 120.0, 300.0])
    assert await completion(pool) == 1

    path.write_text(metered({"attribute": "acme.power", "lowerIsBetter": False}))
    await wait_until(lambda: pool.sample("epp_config_reloads_total", result="success") == 1, message="reloaded")
    assert await completion(pool) == 0  # the new instance: the most power-hungry pod now

    path.write_text(metered({"attribute": "acme.power"}).replace("custom-metric-scorer", "gone-scorer"))
    await wait_until(lambda: pool.sample("epp_config_reloads_total", result="rejected") == 1, message="rejected")
    async with grpc.aio.insecure_channel(pool.picker.health_target) as channel:
        status = await pb.ConfigStub(channel).GetConfig(pb.GetConfigRequest(), timeout=10)
    assert "plugin type 'gone-scorer' of acme-broken 0.1.0 (acme_gone:DEFINITION) cannot be imported: " in (
        status.last_reload.error
    )
    assert await completion(pool) == 0  # the last good configuration still routes

    assert "acme_broken" not in sys.modules  # imported when a configuration first names one of its types
    path.write_text(metered({"attribute": "acme.power"}).replace("custom-metric-scorer", "wild-scorer"))
    await wait_until(lambda: pool.sample("epp_config_reloads_total", result="success") == 2, message="reloaded")
    assert sys.modules["acme_broken"].ON_THE_MAIN_THREAD is False  # off the event loop (a thread), not on it
    await completion(pool)
    assert errors(pool, "wild-scorer", "out_of_range") == 1  # its scores of 7 clamped: the reload swapped it in
