"""A real ExtProcServer on loopback port 0 per test, with a grpc.aio client channel to it."""

from __future__ import annotations

from collections.abc import AsyncIterator

import grpc
import pytest
from extproc_harness import RecordingPipeline, Running, Start

from epp.extproc.processor import Pipelines, StreamOptions
from epp.extproc.server import ExtProcOptions, ExtProcServer
from epp.extproc.tls import TlsConfig
from epp.telemetry.metrics import EppMetrics


@pytest.fixture
async def start_server() -> AsyncIterator[Start]:
    started: list[Running] = []

    async def start(
        pipeline: RecordingPipeline | None = None,
        *,
        options: StreamOptions | None = None,
        tls: TlsConfig | None = None,
        ready: bool = True,
        pipelines: Pipelines | None = None,
        ext_proc: ExtProcOptions | None = None,
    ) -> Running:
        """A server whose streams get ``pipeline`` (a fresh recording one by default), or ``pipelines``."""
        pipeline = pipeline or RecordingPipeline()
        metrics = EppMetrics()
        server = ExtProcServer(pipelines or pipeline, metrics, options=options or StreamOptions(), ext_proc=ext_proc)
        grpc_port, health_port = await server.start("127.0.0.1", 0, 0, tls)
        server.set_ready(ready)
        if tls is None:
            channel = grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}")
        else:
            channel = grpc.aio.secure_channel(
                f"127.0.0.1:{grpc_port}", grpc.ssl_channel_credentials(root_certificates=tls.cert_pem)
            )
        running = Running(
            server,
            pipeline,
            metrics,
            grpc_port,
            health_port,
            channel,
            grpc.aio.insecure_channel(f"127.0.0.1:{health_port}"),
        )
        started.append(running)
        return running

    yield start
    for running in started:
        await running.channel.close()
        await running.health_channel.close()
        await running.server.stop(0)


@pytest.fixture
async def running(start_server: Start) -> Running:
    return await start_server()
