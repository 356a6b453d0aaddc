"""Server surface: health on both ports, Watch, reflection, TLS (self-signed and mounted), stop."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from extproc_harness import RECV_TIMEOUT, Running, Start, post_headers, request_body, request_headers
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from epp.extproc import pb
from epp.extproc.processor import StreamOptions
from epp.extproc.server import ExtProcOptions, ExtProcServer
from epp.extproc.tls import TlsConfig, TlsError
from epp_sim.waits import wait_until

SERVING = pb.HealthCheckResponse.SERVING
NOT_SERVING = pb.HealthCheckResponse.NOT_SERVING
SERVICES = ("", "liveness", "readiness", pb.EXT_PROC_SERVICE, "inference-extension")


async def _statuses(channel: object) -> dict[str, int]:
    stub = pb.HealthStub(channel)
    out = {}
    for service in SERVICES:
        response = await stub.Check(pb.HealthCheckRequest(service=service), timeout=RECV_TIMEOUT)
        out[service] = response.status
    return out


async def test_health_follows_readiness_and_liveness_is_always_serving(start_server: Start) -> None:
    running = await start_server(ready=False, ext_proc=ExtProcOptions(health_checking=True))
    for channel in (running.health_channel, running.channel):
        assert await _statuses(channel) == {
            "": NOT_SERVING,
            "liveness": SERVING,
            "readiness": NOT_SERVING,
            pb.EXT_PROC_SERVICE: NOT_SERVING,
            "inference-extension": NOT_SERVING,
        }
    running.server.set_ready(True)
    for channel in (running.health_channel, running.channel):
        assert set((await _statuses(channel)).values()) == {SERVING}
    listed = await pb.HealthStub(running.health_channel).List(pb.HealthListRequest(), timeout=RECV_TIMEOUT)
    assert {name: s.status for name, s in listed.statuses.items()} == {
        "": SERVING,
        "liveness": SERVING,
        "readiness": SERVING,
        pb.EXT_PROC_SERVICE: SERVING,
    }


async def test_watch_sees_each_change_and_ends_at_shutdown(start_server: Start) -> None:
    running = await start_server(ready=False)
    watch = pb.HealthStub(running.health_channel).Watch(pb.HealthCheckRequest(service="readiness"))
    assert (await asyncio.wait_for(watch.read(), RECV_TIMEOUT)).status == NOT_SERVING
    running.server.set_ready(True)
    assert (await asyncio.wait_for(watch.read(), RECV_TIMEOUT)).status == SERVING
    running.server.health.shutdown()
    assert (await asyncio.wait_for(watch.read(), RECV_TIMEOUT)).status == NOT_SERVING
    assert await asyncio.wait_for(watch.read(), RECV_TIMEOUT) is grpc.aio.EOF
    assert (await _statuses(running.health_channel))["liveness"] == SERVING


async def test_reflection_lists_the_services(start_server: Start) -> None:
    running = await start_server(ext_proc=ExtProcOptions(health_checking=True))
    stub = reflection_pb2_grpc.ServerReflectionStub(running.channel)
    call = stub.ServerReflectionInfo()
    await call.write(reflection_pb2.ServerReflectionRequest(list_services=""))
    response = await asyncio.wait_for(call.read(), RECV_TIMEOUT)
    names = {s.name for s in response.list_services_response.service}
    assert names == {pb.EXT_PROC_SERVICE, pb.HEALTH_SERVICE, pb.REFLECTION_SERVICE}
    await call.write(reflection_pb2.ServerReflectionRequest(file_containing_symbol=pb.EXT_PROC_SERVICE))
    described = await asyncio.wait_for(call.read(), RECV_TIMEOUT)
    assert described.file_descriptor_response.file_descriptor_proto
    await call.done_writing()


async def _routes(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"p"}'))
    head, _ = await call.recv(2)
    assert head.WhichOneof("response") == "request_headers"


async def test_tls_with_a_self_signed_certificate(start_server: Start) -> None:
    tls = TlsConfig.self_signed()
    cert = x509.load_pem_x509_certificate(tls.cert_pem)
    assert cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "Inference Ext"
    validity = cert.not_valid_after_utc - cert.not_valid_before_utc
    assert datetime.timedelta(days=3649) < validity < datetime.timedelta(days=3651)
    running = await start_server(tls=tls)
    await _routes(running)  # the client trusts exactly this PEM

    async with grpc.aio.insecure_channel(f"127.0.0.1:{running.grpc_port}") as plaintext:
        stub = pb.HealthStub(plaintext)
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Check(pb.HealthCheckRequest(), timeout=1.0)


async def test_tls_from_a_cert_path(start_server: Start, tmp_path: Path) -> None:
    generated = TlsConfig.self_signed()
    (tmp_path / "tls.crt").write_bytes(generated.cert_pem)
    (tmp_path / "tls.key").write_bytes(generated.key_pem)
    loaded = TlsConfig.from_cert_path(str(tmp_path))
    assert loaded == generated
    await _routes(await start_server(tls=loaded))


def test_tls_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(TlsError, match="tls.crt"):
        TlsConfig.load(str(tmp_path))
    (tmp_path / "tls.crt").write_bytes(b"not a cert")
    (tmp_path / "tls.key").write_bytes(b"not a key")
    with pytest.raises(TlsError, match="tls.crt: not a PEM certificate"):
        TlsConfig.load(str(tmp_path))


async def test_plaintext_server_routes(running: Running) -> None:
    await _routes(running)


async def test_stop_lets_an_in_flight_stream_finish(running: Running) -> None:
    call = running.open()
    await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"p"}'))
    await call.recv(2)
    stopping = asyncio.create_task(running.server.stop(RECV_TIMEOUT), name="test-stop")
    await wait_until(lambda: not running.server.health.ready)  # stop() begins with NOT_SERVING
    await call.send(pb.ProcessingRequest(response_headers=pb.HttpHeaders(end_of_stream=True)))
    assert (await call.recv_one()).WhichOneof("response") == "response_headers"
    assert await call.end() == []
    await asyncio.wait_for(stopping, RECV_TIMEOUT)
    assert [f.completed for f in running.pipeline.finished_calls] == [True]


async def test_ports_in_use_are_reported(running: Running) -> None:
    second = ExtProcServer(running.pipeline, running.metrics, options=StreamOptions())
    with pytest.raises(OSError, match=f"cannot listen on ext_proc address 127.0.0.1:{running.grpc_port}"):
        await second.start("127.0.0.1", running.grpc_port, 0, None)
    await second.stop(0)
