"""The manifests' /metrics access works end to end: applied with kubectl, scraped with the Secret's token.

``manifests/epp`` goes to the fake API server with ``kubectl apply -k``; the token controller's
stand-in fills the ``epp-metrics-reader-token`` Secret; a picker with upstream's default
(``--metrics-endpoint-auth``) then serves Prometheus holding that token, and refuses the
picker's own ServiceAccount, which may review tokens but not read /metrics.
"""

from __future__ import annotations

import base64
from pathlib import Path

import aiohttp

from epp_sim.pytest_plugin import PickerFactory
from epp_sim.stack.cluster import FakeCluster

MANIFESTS = Path(__file__).resolve().parents[2] / "manifests"


async def _scrape(url: str, token: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(url, headers={"Authorization": f"Bearer {token}"}) as resp,
    ):
        return resp.status


async def test_prometheus_reads_metrics_with_the_manifests_secret(
    epp_cluster: FakeCluster, epp_picker: PickerFactory
) -> None:
    await epp_cluster.kubectl("apply", "-k", str(MANIFESTS / "epp"))
    encoded = await epp_cluster.kubectl("get", "secret", "epp-metrics-reader-token", "-o", "jsonpath={.data.token}")
    prometheus = base64.b64decode(encoded).decode()
    own = (await epp_cluster.kubectl("create", "token", "vllm-llama3-8b-instruct-epp")).strip()

    picker = await epp_picker(
        "--endpoint-selector", "app=none", "--endpoint-target-ports", "8000", "--metrics-endpoint-auth=true"
    )
    assert await _scrape(picker.metrics_url, prometheus) == 200
    assert await _scrape(picker.metrics_url, own) == 403
