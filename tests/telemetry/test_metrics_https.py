"""/metrics over HTTPS (``--metrics-cert-dir``) and with client certificates (``--metrics-client-ca-file``).

A throwaway CA signs the server's certificate (for 127.0.0.1) and a client's; real TLS handshakes
on loopback show what is served, what is refused, and that a bad file stops the start with a
message naming the flag.
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from epp.telemetry.metrics import EppMetrics
from epp.telemetry.metrics_server import MetricsServer, MetricsTlsError, metrics_ssl_context
from epp_sim.pytest_plugin import PickerFactory
from epp_sim.stack.cluster import FakeCluster

STANDALONE = ("--endpoint-selector", "app=none", "--endpoint-target-ports", "8000")


@dataclass(frozen=True)
class Pki:
    ca: Path
    server_dir: Path
    client_cert: Path
    client_key: Path

    def client(self, *, with_cert: bool = True) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if with_cert:
            context.load_cert_chain(self.client_cert, self.client_key)
        return context


def _issue(
    subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[x509.Name, ec.EllipticCurvePrivateKey] | None
) -> x509.Certificate:
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = issuer or (name, key)
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=1))
        .not_valid_after(now + datetime.timedelta(hours=1))
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
    )
    if subject == "metrics":
        san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
        builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(path: Path, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    path.mkdir(parents=True, exist_ok=True)
    (path / "tls.crt").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    (path / "tls.key").write_bytes(pem)
    return path / "tls.crt", path / "tls.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    root = tmp_path_factory.mktemp("pki")
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _issue("metrics-ca", ca_key, None)
    ca_file, _ = _write(root / "ca", ca, ca_key)
    keys = {who: ec.generate_private_key(ec.SECP256R1()) for who in ("metrics", "prometheus")}
    _write(root / "server", _issue("metrics", keys["metrics"], (ca.subject, ca_key)), keys["metrics"])
    client_cert, client_key = _write(
        root / "client", _issue("prometheus", keys["prometheus"], (ca.subject, ca_key)), keys["prometheus"]
    )
    return Pki(ca_file, root / "server", client_cert, client_key)


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
