"""/metrics over HTTPS (``--metrics-cert-dir``) and with client certificates (``--metrics-client-ca-file``).

A throwaway CA signs the server's certificate (for 127.0.0.1) and a client's; real TLS handshakes
on loopback show what is served, what is refused, and that a bad file stops the start with a
message naming the flag.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import pytest

from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_server import MetricsServer, MetricsTlsError, metrics_ssl_context
from epp_sim.pki import Pki, make_pki
from epp_sim.pytest_plugin import PickerFactory
from epp_sim.stack.cluster import FakeCluster

STANDALONE = ("--endpoint-selector", "app=none", "--endpoint-target-ports", "8000")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _status(url: str, context: ssl.SSLContext | None = None, token: str = "") -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with aiohttp.ClientSession() as http, http.get(url, ssl=context or False, headers=headers) as resp:
        await resp.read()
        return resp.status


async def test_https_and_required_client_certificates(pki: Pki) -> None:
    server = MetricsServer(EppMetrics(), cert_dir=str(pki.server_dir), client_ca_file=str(pki.ca))
    port = await server.start("127.0.0.1", 0)
    try:
        url = f"https://127.0.0.1:{port}/metrics"
        assert await _status(url, pki.client()) == 200
        with pytest.raises(aiohttp.ClientError):  # the handshake needs a certificate the CA signed
            await _status(url, pki.client(with_cert=False))
        with pytest.raises(aiohttp.ClientError):  # no plaintext on the HTTPS port
            await _status(f"http://127.0.0.1:{port}/metrics")
    finally:
        await server.stop()

    server = MetricsServer(EppMetrics(), cert_dir=str(pki.server_dir))  # HTTPS, any client
    port = await server.start("127.0.0.1", 0)
    try:
        assert await _status(f"https://127.0.0.1:{port}/healthz", pki.client(with_cert=False)) == 200
    finally:
        await server.stop()


def test_the_context_requires_tls_1_2_and_names_the_flag_of_a_bad_file(pki: Pki, tmp_path: Path) -> None:
    context = metrics_ssl_context(str(pki.server_dir), str(pki.ca))
    assert context.minimum_version == ssl.TLSVersion.TLSv1_2 and context.verify_mode == ssl.CERT_REQUIRED
    assert metrics_ssl_context(str(pki.server_dir)).verify_mode == ssl.CERT_NONE
    with pytest.raises(MetricsTlsError, match=f"--metrics-cert-dir {tmp_path}: cannot use tls.crt and tls.key"):
        metrics_ssl_context(str(tmp_path))
    not_pem = tmp_path / "ca.crt"
    not_pem.write_text("not a certificate")
    with pytest.raises(MetricsTlsError, match=f"--metrics-client-ca-file {not_pem}: no usable CA certificate"):
        metrics_ssl_context(str(pki.server_dir), str(not_pem))


async def test_the_picker_serves_https_behind_the_token_check(
    pki: Pki, epp_cluster: FakeCluster, epp_picker: PickerFactory
) -> None:
    await epp_cluster.apply({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "prom"}})
    token = (await epp_cluster.kubectl("create", "token", "prom")).strip()
    picker = await epp_picker(
        *STANDALONE,
        "--metrics-endpoint-auth=true",
        f"--metrics-cert-dir={pki.server_dir}",
        f"--metrics-client-ca-file={pki.ca}",
    )
    url = f"https://127.0.0.1:{picker.runtime.ports.metrics}/metrics"
    assert await _status(url, pki.client()) == 401  # a client certificate is not a token
    assert await _status(url, pki.client(), token) == 403
