"""The data layer as EndpointPickerConfig sets it, through the whole picker: fake API server, ``epp
serve``, ext_proc, and model servers that speak SGLang's, Triton's or a custom engine's metric names.

epp_sim's simulators speak vLLM's names only, so each pod here is a tiny aiohttp server on its
own loopback address serving a fixed page.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from pathlib import Path

import yaml
from aiohttp import web

from epp.framework.endpoint import EndpointState
from epp_sim.kube_objects import inference_pool
from epp_sim.ports import free_port
from epp_sim.pytest_plugin import ClientFactory, PickerFactory
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.manifests import CRDS_DIR
from epp_sim.stack.picker import InProcessPicker
from epp_sim.waits import wait_until

POOL = "models"
PINNED = Path(__file__).resolve().parents[1] / "tests" / "upstream_configs"
CHART = "config/charts/routerlib/templates/_config.yaml"


def chart_config(model_servers: str) -> str:
    """What the llm-d router chart renders for ``modelServers.type: <model_servers>`` (its routerlib
    ``_config.yaml``), as pinned in ``tests/upstream_configs/`` (``scripts/upstream_configs.py``)."""
    index = yaml.safe_load((PINNED / "index.yaml").read_text())
    where = f"{model_servers}.default-plugins.yaml"
    (file,) = (e["file"] for e in index["configs"] if e["source"] == CHART and e["where"] == where)
    return (PINNED / file).read_text()


def sglang_page(queue: int, kv: float) -> bytes:
    return (
        f'# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{{model_name="m"}} {queue}\n'
        f'# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{{model_name="m"}} 2\n'
        f'# TYPE sglang:token_usage gauge\nsglang:token_usage{{model_name="m"}} {kv}\n'
        '# TYPE sglang:cache_config_info gauge\nsglang:cache_config_info{page_size="16",num_pages="1000"} 1\n'
    ).encode()


@contextlib.asynccontextmanager
async def pages(port: int, by_host: Mapping[str, bytes], paths: list[str] | None = None) -> AsyncIterator[None]:
    """One server per host on ``port``, each answering every path with its page (recorded in ``paths``)."""
    runners: list[web.AppRunner] = []
    try:
        for host, page in by_host.items():

            async def metrics(request: web.Request, body: bytes = page) -> web.Response:
                if paths is not None:
                    paths.append(request.path)
                return web.Response(body=body, content_type="text/plain")

            app = web.Application()
            app.router.add_get("/{path:.*}", metrics)
            runner = web.AppRunner(app, access_log=None, handle_signals=False)
            runners.append(runner)
            await runner.setup()
            await web.TCPSite(runner, host, port).start()
        yield
    finally:
        for runner in runners:
            await runner.cleanup()


async def pool_of(cluster: FakeCluster, port: int, pods: Mapping[str, tuple[str, Mapping[str, str]]]) -> None:
    """The pool and its Ready pods: name → (IP, extra labels)."""
    await cluster.apply_manifests(CRDS_DIR)
    await cluster.apply(inference_pool("v1", POOL, {"app": "m"}, port))
    for name, (ip, labels) in pods.items():
        await cluster.create_ready_pod(name, ip, {"app": "m", **labels}, port=port)


def endpoints(picker: InProcessPicker) -> dict[str, EndpointState]:
    return {s.endpoint.pod_name: s for s in picker.runtime.pools[0].datastore.endpoints()}


def config_file(tmp_path: Path, text: str) -> str:
    """Write (or rewrite: the picker reloads it) the config file; its path."""
    path = tmp_path / "epp-config.yaml"
    path.write_text(text)
    return str(path)


async def test_an_llm_d_sglang_config_scrapes_sglang_names_and_routes_on_them(
    epp_cluster: FakeCluster, epp_picker: PickerFactory, epp_extproc: ClientFactory, tmp_path: Path
) -> None:
    port = free_port()
    await pool_of(epp_cluster, port, {"busy": ("127.0.0.41", {}), "idle": ("127.0.0.42", {})})
    async with pages(port, {"127.0.0.41": sglang_page(queue=30, kv=0.9), "127.0.0.42": sglang_page(queue=0, kv=0.1)}):
        picker = await epp_picker(
            f"--pool-name={POOL}", f"--config-file={config_file(tmp_path, chart_config('sglang'))}"
        )
        await picker.wait_routing(POOL, 2)
        got = endpoints(picker)
        busy, idle = got["busy"].metrics, got["idle"].metrics
        assert (busy.waiting_queue, busy.running, busy.kv_cache_usage) == (30, 2, 0.9)
        assert (idle.waiting_queue, idle.cache_block_size, idle.cache_num_blocks) == (0, 16, 1000)
        client = await epp_extproc(picker)
        for _ in range(3):
            routed = await client.route({"model": "m", "prompt": "hello"})
            assert (routed.status, routed.endpoint) == (200, f"127.0.0.42:{port}")


CUSTOM_ENGINES = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: core-metrics-extractor
  parameters:
    engineLabelKey: example.com/engine
    defaultEngine: sglang
    engineConfigs:
    - name: my-engine
      queuedRequestsSpec: "custom_queue_size{status=waiting}"
      runningRequestsSpec: custom_running_size
      kvUsageSpec: custom_cache_utilization
      customMetrics:
      - attributeKey: custom.queue_depth
        metricSpec: "custom_queue_depth{tier=gold}"
"""
MY_ENGINE_PAGE = b"""custom_queue_size{status="waiting"} 5
custom_queue_size{status="done"} 99
custom_running_size 4
custom_cache_utilization 0.5
custom_queue_depth{tier="silver"} 1
custom_queue_depth{tier="gold"} 12
"""
TRITON_PAGE = b"""nv_inference_pending_request_count{model="m",version="1"} 6
nv_inference_exec_count{model="m",version="1"} 8
"""


async def test_engine_labels_pick_configured_built_in_and_default_engines(
    epp_cluster: FakeCluster, epp_picker: PickerFactory, tmp_path: Path
) -> None:
    port = free_port()
    pods = {
        "custom": ("127.0.0.43", {"example.com/engine": "my-engine"}),  # the configured label key
        "gie": ("127.0.0.44", {"inference.networking.k8s.io/engine-type": "triton"}),  # GIE's, the fallback
        # llm-d.ai's label is not the configured key here: the pod gets the default engine.
        "default": ("127.0.0.45", {"llm-d.ai/engine-type": "triton"}),
    }
    await pool_of(epp_cluster, port, pods)
    by_host = {"127.0.0.43": MY_ENGINE_PAGE, "127.0.0.44": TRITON_PAGE, "127.0.0.45": sglang_page(queue=9, kv=0.3)}
    async with pages(port, by_host):
        picker = await epp_picker(f"--pool-name={POOL}", f"--config-file={config_file(tmp_path, CUSTOM_ENGINES)}")
        await picker.wait_routing(POOL, 3)
        got = {name: state.metrics for name, state in endpoints(picker).items()}
        assert (got["custom"].waiting_queue, got["custom"].running, got["custom"].kv_cache_usage) == (5, 4, 0.5)
        assert got["custom"].custom == {"custom.queue_depth": 12.0}
        assert (got["gie"].waiting_queue, got["gie"].running, got["gie"].custom) == (6, 8, {})
        assert (got["default"].waiting_queue, got["default"].kv_cache_usage) == (9, 0.3)


async def test_a_reload_changes_the_data_layer_and_a_bad_one_keeps_the_last_good(
    epp_cluster: FakeCluster, epp_picker: PickerFactory, tmp_path: Path
) -> None:
    port = free_port()
    await pool_of(epp_cluster, port, {"pod": ("127.0.0.46", {})})
    async with pages(port, {"127.0.0.46": sglang_page(queue=7, kv=0.25)}):
        path = config_file(tmp_path, chart_config("vllm-http"))  # the wrong engine
        picker = await epp_picker(f"--pool-name={POOL}", f"--config-file={path}")
        registry = picker.runtime.metrics.registry

        def sample(name: str, **labels: str) -> float:
            return registry.get_sample_value(name, labels) or 0.0

        await wait_until(lambda: sample("epp_scrape_errors_total", reason="parse") > 0, message="vLLM names missing")
        assert endpoints(picker)["pod"].metrics.updated_at == 0.0
        config_file(tmp_path, chart_config("sglang"))
        await wait_until(lambda: endpoints(picker)["pod"].metrics.waiting_queue == 7, message="reloaded as SGLang")

        bad = chart_config("sglang").replace(
            "scheme: http\n", f"scheme: https\n    insecureSkipVerify: false\n    caCertPath: {tmp_path / 'none.pem'}\n"
        )
        config_file(tmp_path, bad)
        await wait_until(lambda: sample("epp_config_reloads_total", result="rejected") == 1, message="rejected")
        assert sample("epp_config_last_reload_successful") == 0
        scraped_at = endpoints(picker)["pod"].metrics.updated_at
        await wait_until(lambda: endpoints(picker)["pod"].metrics.updated_at > scraped_at, message="still scraping")
        assert picker.runtime.pools[0].scrapers.scraped == {"default/pod-rank-0"}


async def test_the_config_wins_over_gie_flags_for_what_it_sets(
    epp_cluster: FakeCluster, epp_picker: PickerFactory, tmp_path: Path
) -> None:
    port = free_port()
    await pool_of(epp_cluster, port, {"pod": ("127.0.0.47", {})})
    paths: list[str] = []
    config = (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\n"
        "plugins:\n- type: queue-scorer\n- {type: metrics-data-source, parameters: {path: /from-config}}\n"
    )
    page = b"my_queue 4\nvllm:num_requests_running 1\nvllm:kv_cache_usage_perc 0.5\n"
    async with pages(port, {"127.0.0.47": page}, paths):
        picker = await epp_picker(
            f"--pool-name={POOL}",
            f"--config-file={config_file(tmp_path, config)}",
            "--model-server-metrics-path=/from-flag",  # the config sets the path: it wins
            "--total-queued-requests-metric=my_queue",  # the config sets no engine names: the flag applies
        )
        await picker.wait_routing(POOL, 1)
        assert endpoints(picker)["pod"].metrics.waiting_queue == 4
        assert set(paths) == {"/from-config"}
