"""GIE's model-server scraping flags: metric-name overrides, scheme, path, port, certificate check.

The GIE chart scrapes SGLang, Triton and trtllm-serve pods by passing metric names as flags (with
quotes inside the argument); those override the engine maps for every endpoint, whatever its
engine label, and an empty one turns the metric off.
"""

from __future__ import annotations

import dataclasses
import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from aiohttp import web
from chart_args import chart_args
from model_server_tls import server_tls

from epp.cli import build_parser
from epp.config.options import ModelServerMetricsOptions, OptionsError
from epp.datalayer.engines import ENGINES, read, with_overrides
from epp.framework.endpoint import MetricsSnapshot
from epp.serve_command import options_from_args
from epp_sim.kube_objects import inference_pool
from epp_sim.ports import free_port
from epp_sim.pytest_plugin import PickerFactory
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.manifests import CRDS_DIR
from epp_sim.waits import wait_until

SGLANG_PAGE = b"""\
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="qwen"} 7
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="qwen"} 3
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="qwen"} 0.25
# TYPE sglang:cache_config_info gauge
sglang:cache_config_info{page_size="16",num_pages="1000"} 1
"""
TRITON_PAGE = b"""\
nv_trt_llm_request_metrics{request_type="waiting"} 2
nv_trt_llm_request_metrics{request_type="scheduled"} 5
nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"} 0.5
"""
TRTLLM_SERVE_PAGE = b"""\
trtllm_num_requests_waiting 4
trtllm_num_requests_running 6
trtllm_kv_cache_utilization 0.75
trtllm_cache_config_info{block_size="32",num_gpu_blocks="500"} 1
"""


def _options(*args: str) -> ModelServerMetricsOptions:
    return options_from_args(build_parser("serve").parse_args(["serve", "--pool-name=p", *args])).model_server_metrics


def _chart_flags(name: str) -> list[str]:
    """The chart's arguments minus pool, logging, config and tracing: the scraping flags, as rendered."""
    args = list(chart_args(name).args)
    start = args.index("--pool-group") + 2
    return args[start : args.index("--zap-encoder")]


@pytest.mark.parametrize(
    ("chart", "page", "expected"),
    [
        (
            "gie-sglang",
            SGLANG_PAGE,
            MetricsSnapshot(
                waiting_queue=7, running=3, kv_cache_usage=0.25, cache_block_size=16, cache_num_blocks=1000
            ),
        ),
        ("gie-triton-tensorrt-llm", TRITON_PAGE, MetricsSnapshot(waiting_queue=2, running=5, kv_cache_usage=0.5)),
        (
            "gie-trtllm-serve",
            TRTLLM_SERVE_PAGE,
            MetricsSnapshot(waiting_queue=4, running=6, kv_cache_usage=0.75, cache_block_size=32, cache_num_blocks=500),
        ),
    ],
)
def test_the_charts_flags_read_their_engine_from_a_pod_without_an_engine_label(
    chart: str, page: bytes, expected: MetricsSnapshot
) -> None:
    spec = with_overrides(ENGINES["vllm"], _options(*_chart_flags(chart)))  # no label: the vLLM map
    got = read(page, spec, updated_at=1.0)
    assert got.errors == ()  # LoRA turned off where the chart turns it off: nothing reported missing
    assert got.snapshot == dataclasses.replace(expected, updated_at=1.0)


def test_an_empty_name_turns_a_field_off_and_unset_keeps_the_engines() -> None:
    spec = with_overrides(ENGINES["vllm"], _options("--total-queued-requests-metric", ""))
    assert spec.queued == () and spec.running == ENGINES["vllm"].running
    got = read(b"vllm:num_requests_running 2\nvllm:kv_cache_usage_perc 0.1\n", spec)
    assert got.errors == () and got.snapshot.running == 2
    assert with_overrides(ENGINES["sglang"], _options()) is ENGINES["sglang"]


def test_a_cache_info_metric_gie_does_not_know_is_read_with_gies_labels() -> None:
    spec = with_overrides(ENGINES["sglang"], _options("--cache-info-metric=my_cache_info"))
    got = read(b'my_cache_info{block_size="64",num_gpu_blocks="10"} 1\n', spec)
    assert (got.snapshot.cache_block_size, got.snapshot.cache_num_blocks) == (64, 10)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--total-running-requests-metric", "bad{label"), "--total-running-requests-metric: cannot parse"),
        (("--lora-info-metric", "x{=y}"), "--lora-info-metric: cannot parse"),
        (("--model-server-metrics-scheme", "ftp"), "--model-server-metrics-scheme: must be http or https"),
        (("--model-server-metrics-path", "metrics"), "--model-server-metrics-path: must start with '/'"),
    ],
)
def test_bad_values_name_the_flag(args: tuple[str, ...], message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        _options(*args)


@asynccontextmanager
async def _model_server(host: str, port: int, path: str, body: bytes, tls: ssl.SSLContext) -> AsyncIterator[None]:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/plain")

    app = web.Application()
    app.router.add_get(path, metrics)
    runner = web.AppRunner(app, access_log=None, handle_signals=False)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=tls).start()
    try:
        yield
    finally:
        await runner.cleanup()


async def test_epp_serve_scrapes_https_on_the_metrics_port_and_path_with_the_charts_names(
    epp_cluster: FakeCluster, epp_picker: PickerFactory, tmp_path: Path
) -> None:
    host, metrics_port = "127.0.0.7", free_port()
    tls, _ = server_tls(tmp_path, host)
    await epp_cluster.apply_manifests(CRDS_DIR)
    await epp_cluster.apply(inference_pool("v1", "sglang", {"app": "sglang"}, 8000))
    await epp_cluster.create_ready_pod("sglang-0", host, {"app": "sglang"}, port=8000)
    async with _model_server(host, metrics_port, "/custom/metrics", SGLANG_PAGE, tls):
        picker = await epp_picker(
            "--pool-name=sglang",
            *_chart_flags("gie-sglang"),
            "--model-server-metrics-scheme=https",  # certificate not checked: upstream's default
            '--model-server-metrics-path="/custom/metrics"',
            f"--model-server-metrics-port={metrics_port}",
        )
        store = picker.runtime.pools[0].datastore

        def scraped() -> bool:
            return any(s.metrics.waiting_queue == 7 and s.metrics.cache_num_blocks == 1000 for s in store.endpoints())

        await wait_until(scraped, timeout=10, message="the SGLang pod scraped over HTTPS on its metrics port")
        (state,) = store.endpoints()
        assert (state.endpoint.port, state.endpoint.metrics_port) == (8000, metrics_port)
        assert (state.metrics.running, state.metrics.kv_cache_usage) == (3, 0.25)
