"""Every argument list the upstream charts render starts ``epp serve`` and reaches SERVING.

The lists (``tests/deploy/chart_args/``) are used verbatim; the test adds only what the sandbox
needs, after them so they win: the fake API server's kubeconfig, the ConfigMap's file at a path
that exists here, and free loopback ports. The chart's pool is created in the fake cluster.
Each run is also a check of ``--zap-encoder json`` under real conditions: every stderr line of the
process, start to exit, is one JSON object.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from chart_args import chart_args, chart_names
from serve_process import serve_process

from epp_sim.kube_objects import inference_pool
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.manifests import CRDS_DIR


def test_each_chart_and_engine_is_kept() -> None:
    assert chart_names() == [
        "gie-sglang",
        "gie-triton-tensorrt-llm",
        "gie-trtllm-serve",
        "gie-vllm",
        "llm-d-router",
    ]


@pytest.mark.parametrize("name", chart_names())
async def test_chart_arguments_reach_serving(name: str, epp_cluster: FakeCluster, tmp_path: Path) -> None:
    chart = chart_args(name)
    namespace = chart.value("--pool-namespace")
    await epp_cluster.apply_manifests(CRDS_DIR)
    await epp_cluster.apply(
        inference_pool("v1", chart.value("--pool-name"), {"app": "model-server"}, 8000, namespace=namespace)
    )
    config = tmp_path / "default-plugins.yaml"
    config.write_text(chart.config, encoding="utf-8")
    sandbox = (f"--kubeconfig={epp_cluster.kubeconfig}", f"--config-file={config}")
    async with serve_process(*chart.args, *sandbox, env=chart.env) as serve:
        await serve.wait_serving()
    records = [json.loads(line) for line in serve.stderr]
    assert records and all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    assert not [r for r in records if r["level"] in ("error", "critical")]
