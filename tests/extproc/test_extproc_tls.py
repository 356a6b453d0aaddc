"""TLS on the ext_proc port, through real handshakes: upstream's self-signed certificate, reload on
change (new handshakes get the new pair, open streams survive, a bad file keeps the old one),
TLS 1.1 refused, and ``--tls-cipher-suites`` enforced by a real ``epp serve`` process."""

from __future__ import annotations

import asyncio
import datetime
import logging
import os
import socket
import ssl
import sys
import threading
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from extproc_harness import RECV_TIMEOUT, RecordingPipeline, post_headers, request_body, request_headers

from epp.extproc import pb
from epp.extproc.cert_reload import CertReloader
from epp.extproc.processor import StreamOptions
from epp.extproc.server import ExtProcServer
from epp.extproc.tls import ServerTls, TlsConfig, TlsError
from epp.telemetry.metrics import EppMetrics
from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.ports import free_port
from epp_sim.stack.extproc_client import ExtProcCall
from epp_sim.waits import wait_until

Serve = Callable[[ServerTls], Awaitable[int]]


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start an ExtProcServer with the given TLS; returns its ext_proc port."""
    servers: list[ExtProcServer] = []

    async def start(tls: ServerTls) -> int:
        server = ExtProcServer(RecordingPipeline(), EppMetrics(), options=StreamOptions())
        servers.append(server)
        grpc_port, _ = await server.start("127.0.0.1", 0, 0, tls)
        server.set_ready(True)
        return grpc_port

    yield start
    for server in servers:
        await server.stop(0)


def _pair() -> TlsConfig:
    """A quick pair for the tests that only need one (upstream's 4096-bit key is checked once, below)."""
    return TlsConfig.self_signed(key_size=2048)


def _write_pair(directory: Path, pair: TlsConfig) -> None:
    (directory / "tls.key").write_bytes(pair.key_pem)
    (directory / "tls.crt").write_bytes(pair.cert_pem)


def _client_context(*, ciphers: str | None = None, tls_max: ssl.TLSVersion | None = None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    if ciphers is not None:
        context.set_ciphers(ciphers)
    if tls_max is not None:
        with warnings.catch_warnings():  # TLS 1.0/1.1 are deprecated: that is the point
            warnings.simplefilter("ignore", DeprecationWarning)
            context.minimum_version = min(ssl.TLSVersion.TLSv1, tls_max)
            context.maximum_version = tls_max
    return context


def _handshake(port: int, context: ssl.SSLContext) -> tuple[str, str, bytes]:
    """(version, cipher, the server's certificate in PEM) of one fresh TLS handshake (blocking)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, context.wrap_socket(raw) as tls:
        cipher = tls.cipher()
        version = tls.version()
        der = tls.getpeercert(binary_form=True)
        assert cipher is not None and version is not None and der is not None
        return version, cipher[0], ssl.DER_cert_to_PEM_cert(der).encode()


async def _served_cert(port: int) -> bytes:
    _, _, pem = await asyncio.to_thread(_handshake, port, _client_context())
    return pem


def _same_cert(a: bytes, b: bytes) -> bool:
    return x509.load_pem_x509_certificate(a) == x509.load_pem_x509_certificate(b)


async def _open_stream(channel: grpc.aio.Channel) -> ExtProcCall:
    call = ExtProcCall(pb.ExternalProcessorStub(channel), timeout=RECV_TIMEOUT)
    await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"p"}'))
    head, _ = await call.recv(2)
    assert head.WhichOneof("response") == "request_headers"
    return call


def test_self_signed_certificate_is_upstreams() -> None:
    pair = TlsConfig.self_signed()
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    key = serialization.load_pem_private_key(pair.key_pem, password=None)
    assert isinstance(key, rsa.RSAPrivateKey) and key.key_size == 4096
    assert pair.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")  # PKCS#8
    assert cert.subject == x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Inference Ext")])
    assert cert.issuer == cert.subject
    assert 0 < cert.serial_number < 2**128
    validity = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(days=3649) < validity < datetime.timedelta(days=3651)
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    usage = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    assert usage.digital_signature and usage.key_encipherment and not usage.key_cert_sign
    assert list(cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value) == [
        ExtendedKeyUsageOID.SERVER_AUTH
    ]


def test_a_key_of_another_certificate_is_refused(tmp_path: Path) -> None:
    first, second = _pair(), _pair()
    (tmp_path / "tls.crt").write_bytes(first.cert_pem)
    (tmp_path / "tls.key").write_bytes(second.key_pem)
    with pytest.raises(TlsError, match="tls.key: private key does not match the public key in .*tls.crt"):
        TlsConfig.load(str(tmp_path))


async def test_reload_serves_the_new_pair_to_new_handshakes_and_open_streams_survive(
    serve: Serve, tmp_path: Path
) -> None:
    first, second = _pair(), _pair()
    _write_pair(tmp_path, first)
    reloader = CertReloader(str(tmp_path), TlsConfig.load(str(tmp_path)))
    await reloader.start()
    try:
        port = await serve(reloader)
        target = f"127.0.0.1:{port}"
        async with grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(first.cert_pem)) as old:
            open_call = await _open_stream(old)  # on a connection set up with the first pair
            _write_pair(tmp_path, second)
            await wait_until(
                lambda: _serves(port, second.cert_pem), timeout=5, message="a new handshake gets the new pair"
            )
            async with grpc.aio.secure_channel(target, grpc.ssl_channel_credentials(second.cert_pem)) as new:
                await (await _open_stream(new)).end()
            # The stream opened before the swap carries on: its response phase is answered.
            await open_call.send(pb.ProcessingRequest(response_headers=pb.HttpHeaders(end_of_stream=True)))
            assert (await open_call.recv_one()).WhichOneof("response") == "response_headers"
            assert await open_call.end() == []
    finally:
        await reloader.stop()


async def _serves(port: int, cert_pem: bytes) -> bool:
    return _same_cert(await _served_cert(port), cert_pem)


def _kubelet_update(directory: Path, pair: TlsConfig, version: str) -> None:
    """What the kubelet does to a mounted Secret: a new timestamped folder, then a ``..data`` swap."""
    folder = directory / f"..{version}"
    folder.mkdir()
    _write_pair(folder, pair)
    (directory / "..data_tmp").symlink_to(folder.name)
    os.replace(directory / "..data_tmp", directory / "..data")
    for name in ("tls.crt", "tls.key"):
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")


async def test_a_mounted_secret_update_is_picked_up(serve: Serve, tmp_path: Path) -> None:
    first, second = _pair(), _pair()
    _kubelet_update(tmp_path, first, "2026_01_01")
    reloader = CertReloader(str(tmp_path), TlsConfig.load(str(tmp_path)))
    await reloader.start()
    try:
        port = await serve(reloader)
        assert await _serves(port, first.cert_pem)
        _kubelet_update(tmp_path, second, "2026_02_01")
        await wait_until(lambda: _serves(port, second.cert_pem), timeout=5, message="the swapped Secret is served")
    finally:
        await reloader.stop()


async def test_a_bad_file_keeps_the_current_certificate(
    serve: Serve, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    first = _pair()
    _write_pair(tmp_path, first)
    reloader = CertReloader(str(tmp_path), TlsConfig.load(str(tmp_path)))
    await reloader.start()
    try:
        port = await serve(reloader)
        with caplog.at_level(logging.ERROR, logger="epp.extproc.cert_reload"):
            (tmp_path / "tls.crt").write_bytes(b"-----BEGIN CERTIFICATE-----\nhalf written")
            await wait_until(
                lambda: any("certificate reload failed" in r.message for r in caplog.records),
                timeout=5,
                message="the bad file is read and refused",
            )
        assert "tls.crt: not a PEM certificate" in caplog.records[-1].__dict__["error"]
        assert reloader.current == first
        assert await _serves(port, first.cert_pem)
    finally:
        await reloader.stop()


@pytest.fixture
def tls11_control(tmp_path: Path) -> Iterator[int]:
    """A Python TLS server that accepts TLS 1.0 and 1.1: proves the client below can speak them."""
    _write_pair(tmp_path, _pair())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    context.set_ciphers("DEFAULT:@SECLEVEL=0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        context.minimum_version = ssl.TLSVersion.TLSv1
    listener = socket.create_server(("127.0.0.1", 0))

    def accept_one() -> None:
        conn, _ = listener.accept()
        with conn, context.wrap_socket(conn, server_side=True) as tls:
            tls.recv(1)

    thread = threading.Thread(target=accept_one, name="tls11-control", daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    listener.close()
    thread.join(timeout=5)


async def test_tls_1_1_is_refused_while_1_2_and_1_3_are_served(serve: Serve, tls11_control: int) -> None:
    tls11 = _client_context(ciphers="DEFAULT:@SECLEVEL=0", tls_max=ssl.TLSVersion.TLSv1_1)
    version, _, _ = await asyncio.to_thread(_handshake, tls11_control, tls11)
    assert version == "TLSv1.1"  # the client does speak TLS 1.1
    port = await serve(_pair())
    with pytest.raises(ssl.SSLError):
        await asyncio.to_thread(_handshake, port, tls11)
    tls12 = _client_context(tls_max=ssl.TLSVersion.TLSv1_2)
    assert (await asyncio.to_thread(_handshake, port, tls12))[0] == "TLSv1.2"
    assert (await asyncio.to_thread(_handshake, port, _client_context()))[0] == "TLSv1.3"


async def test_serve_enforces_tls_cipher_suites(tmp_path: Path) -> None:
    """A real ``epp serve``: grpc core reads the suites when it loads, so only a fresh process shows it."""
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        grpc_port = free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "epp", "serve", "--endpoint-selector", "app=x", "--endpoint-target-ports", "8000",
            "--kubeconfig", str(api.kubeconfig), "--bind-address", "127.0.0.1", "--grpc-port", str(grpc_port),
            "--grpc-health-port", str(free_port()), "--metrics-port", str(free_port()), "--drain-timeout=0s",
            "--tls-cipher-suites", "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,TLS_AES_128_GCM_SHA256",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL, start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != "GRPC_SSL_CIPHER_SUITES"},
        )  # fmt: skip
        try:
            allowed = _client_context(ciphers="ECDHE-RSA-AES128-GCM-SHA256", tls_max=ssl.TLSVersion.TLSv1_2)
            await wait_until(lambda: _handshakes(grpc_port, allowed), timeout=30, message="epp serve speaks TLS")
            other = _client_context(ciphers="ECDHE-RSA-AES256-GCM-SHA384", tls_max=ssl.TLSVersion.TLSv1_2)
            with pytest.raises(ssl.SSLError):
                await asyncio.to_thread(_handshake, grpc_port, other)
            assert (await asyncio.to_thread(_handshake, grpc_port, _client_context()))[0] == "TLSv1.3"
        finally:
            proc.terminate()
            assert await asyncio.wait_for(proc.wait(), 30) == 0


async def _handshakes(port: int, context: ssl.SSLContext) -> bool:
    try:
        await asyncio.to_thread(_handshake, port, context)
    except OSError:  # ssl.SSLError is one; refused while the process starts
        return False
    return True
