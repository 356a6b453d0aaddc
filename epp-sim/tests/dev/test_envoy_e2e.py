"""Through a real Envoy: the no-op processor's routing decision picks the backend, bodies stay intact,
SSE streams chunk by chunk, and a dead processor fails the way the bootstrap says."""

from __future__ import annotations

import asyncio
import datetime
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import grpc
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from recording_backends import SSE_FIRST, SSE_REST, Backends

from epp.framework.headers import DESTINATION_ENDPOINT
from epp_sim.bench.noop_processor import NoopProcessor
from epp_sim.stack.envoy import EnvoyProcess
from epp_sim.stack.envoy_config import (
    BodyMode,
    ExtProcTarget,
    RouteBy,
    envoy_bootstrap,
    envoy_bootstrap_plain,
)
from epp_sim.waits import wait_until

BODY = random.Random(7).randbytes(256 * 1024)  # several FULL_DUPLEX chunks; under BUFFERED's 1 MiB cap


@asynccontextmanager
async def chain(
    destination: str,
    *,
    body_mode: BodyMode = "FULL_DUPLEX_STREAMED",
    route_by: RouteBy = "metadata",
    failure_mode_allow: bool = False,
    credentials: grpc.ServerCredentials | None = None,
) -> AsyncIterator[tuple[NoopProcessor, EnvoyProcess]]:
    processor = NoopProcessor([destination] if destination else [], credentials=credentials)
    port = await processor.start("127.0.0.1", 0)
    try:
        bootstrap = envoy_bootstrap(
            listen_port=0,
            ext_proc=ExtProcTarget("127.0.0.1", port),
            admin_port=0,
            failure_mode_allow=failure_mode_allow,
            tls_to_processor=credentials is not None,
            route_by=route_by,
            request_body_mode=body_mode,
            response_body_mode=body_mode,
        )
        async with EnvoyProcess(bootstrap) as envoy:
            yield processor, envoy
    finally:
        await processor.stop()


async def _post(url: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, bytes, str | None]:
    async with aiohttp.ClientSession() as session, session.post(url, data=body, headers=headers) as resp:
        return resp.status, await resp.read(), resp.headers.get("x-backend")


@pytest.mark.parametrize("route_by", ["metadata", "header"])
@pytest.mark.parametrize("body_mode", ["FULL_DUPLEX_STREAMED", "BUFFERED"])
async def test_post_reaches_exactly_the_chosen_backend_with_body_intact(
    backends: Backends, body_mode: BodyMode, route_by: RouteBy
) -> None:
    async with chain(backends.target.address, body_mode=body_mode, route_by=route_by) as (processor, envoy):
        status, echoed, served_by = await _post(f"http://127.0.0.1:{envoy.port}/v1/echo", BODY)

    assert status == 200
    assert served_by == "127.0.0.3"
    assert echoed == BODY  # response path intact too (echoed chunk by chunk in FULL_DUPLEX)
    assert [s.body for s in backends.target.seen] == [BODY]
    assert backends.decoy.seen == []
    assert processor.streams == 1


async def test_get_without_body_is_routed_at_the_headers_phase(backends: Backends) -> None:
    async with (
        chain(backends.target.address) as (_, envoy),
        aiohttp.ClientSession() as session,
        session.get(f"http://127.0.0.1:{envoy.port}/v1/echo") as resp,
    ):
        assert resp.status == 200
    assert [(s.method, s.body) for s in backends.target.seen] == [("GET", b"")]
    assert backends.decoy.seen == []


@pytest.mark.parametrize("route_by", ["metadata", "header"])
async def test_client_cannot_pick_the_backend_with_its_own_header(backends: Backends, route_by: RouteBy) -> None:
    async with chain(backends.target.address, route_by=route_by) as (_, envoy):
        status, _, served_by = await _post(
            f"http://127.0.0.1:{envoy.port}/v1/echo", b"{}", headers={DESTINATION_ENDPOINT: backends.decoy.address}
        )
    assert (status, served_by) == (200, "127.0.0.3")
    assert backends.decoy.seen == []
    # The processor's value replaced the client's; it was not appended.
    assert backends.target.seen[0].headers[DESTINATION_ENDPOINT] == backends.target.address


async def test_sse_response_arrives_chunk_by_chunk(backends: Backends) -> None:
    async with chain(backends.target.address) as (_, envoy), aiohttp.ClientSession() as session:
        url = f"http://127.0.0.1:{envoy.port}/v1/stream"
        async with session.post(url, json={"stream": True}) as resp:
            assert resp.status == 200
            received = b""
            # The backend holds its second event until `release` is set: the first must get here alone.
            async with asyncio.timeout(10):
                while SSE_FIRST not in received:
                    received += await resp.content.readany()
            assert received == SSE_FIRST
            backends.target.release.set()
            received += await resp.read()
    assert received == SSE_FIRST + SSE_REST
    assert backends.decoy.seen == []


async def test_processor_down_fails_closed_with_500(backends: Backends) -> None:
    async with chain(backends.target.address) as (processor, envoy):
        await processor.stop()
        status, _, _ = await _post(f"http://127.0.0.1:{envoy.port}/v1/echo", b"{}")
    assert status == 500
    assert backends.target.seen == [] and backends.decoy.seen == []


async def test_processor_down_fail_open_has_no_destination_so_503(backends: Backends) -> None:
    async with chain(backends.target.address, body_mode="BUFFERED", failure_mode_allow=True) as (processor, envoy):
        await processor.stop()
        status, _, _ = await _post(f"http://127.0.0.1:{envoy.port}/v1/echo", b"{}")
    assert status == 503
    assert backends.target.seen == [] and backends.decoy.seen == []


async def test_envoy_health_checks_the_processor(backends: Backends) -> None:
    async with chain(backends.target.address) as (processor, envoy), aiohttp.ClientSession() as session:

        async def ext_proc_health_flags() -> str:
            async with session.get(f"{envoy.admin_url}/clusters") as resp:
                lines = (await resp.text()).splitlines()
            return next(line for line in lines if line.startswith("ext_proc::") and "::health_flags::" in line)

        async def healthy() -> bool:
            return (await ext_proc_health_flags()).endswith("::healthy")

        async def failed_probe() -> bool:
            return "failed_active_hc" in await ext_proc_health_flags()

        await wait_until(healthy, timeout=10, message="ext_proc host healthy")
        await processor.stop()
        await wait_until(failed_probe, timeout=10, message="ext_proc host failed its health check")


def _self_signed() -> tuple[bytes, bytes]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Inference Ext")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, cert.public_bytes(serialization.Encoding.PEM)


async def test_tls_to_a_self_signed_processor(backends: Backends) -> None:
    key_pem, cert_pem = _self_signed()
    credentials = grpc.ssl_server_credentials([(key_pem, cert_pem)])
    async with chain(backends.target.address, credentials=credentials) as (processor, envoy):
        status, echoed, served_by = await _post(f"http://127.0.0.1:{envoy.port}/v1/echo", BODY)
    assert (status, served_by, echoed) == (200, "127.0.0.3", BODY)
    assert processor.streams == 1


async def test_plain_envoy_to_a_static_backend(backends: Backends) -> None:
    bootstrap = envoy_bootstrap_plain(0, backends.target.host, backends.target.port, 0)
    async with EnvoyProcess(bootstrap) as envoy:
        status, echoed, served_by = await _post(f"http://127.0.0.1:{envoy.port}/v1/echo", BODY)
    assert (status, served_by, echoed) == (200, "127.0.0.3", BODY)
    assert backends.decoy.seen == []


async def test_no_processor_routes_on_the_client_header(backends: Backends) -> None:
    bootstrap = envoy_bootstrap(listen_port=0, ext_proc=None, admin_port=0, route_by="header")
    async with EnvoyProcess(bootstrap) as envoy:
        url = f"http://127.0.0.1:{envoy.port}/v1/echo"
        status, _, served_by = await _post(url, b"{}", headers={DESTINATION_ENDPOINT: backends.decoy.address})
        missing, _, _ = await _post(url, b"{}")
    assert (status, served_by) == (200, "127.0.0.2")
    assert missing == 503
