"""``epp serve`` as a user runs it: flag errors, and NOT_SERVING → SERVING seen through grpcurl."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from epp.cli import build_parser
from epp.config.options import OptionsError
from epp.serve_command import options_from_args
from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.ports import free_port
from epp_sim.waits import wait_until

GRPCURL = Path(sys.executable).parent / "grpcurl"


def parse(*argv: str) -> object:
    return options_from_args(build_parser().parse_args(["serve", *argv]))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ((), "exactly one of --pool-name or --endpoint-selector"),
        (("--pool-name", "p", "--endpoint-selector", "app=x"), "exactly one of"),
        (("--endpoint-selector", "app=x"), "--endpoint-target-ports is required"),
        (("--pool-name", "p", "--refresh-metrics-interval", "fast"), "--refresh-metrics-interval: invalid duration"),
        (("--pool-name", "p", "--pool-group", "example.com"), "--pool-group: must be"),
        (("--pool-name", "p", "--config-file", "a", "--config-text", "b"), "mutually exclusive"),
    ],
)
def test_flag_errors_name_the_flag(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(OptionsError, match=message):
        parse(*argv)


def test_upstream_defaults() -> None:
    options = parse("--pool-name", "p", "--secure-serving=false", "--refresh-metrics-interval", "100ms")
    assert options.grpc_port == 9002 and options.grpc_health_port == 9003  # type: ignore[attr-defined]
    assert options.metrics_endpoint.port == 9090  # type: ignore[attr-defined]
    assert options.tls.secure_serving is False  # type: ignore[attr-defined]
    assert options.refresh_metrics_interval == pytest.approx(0.1)  # type: ignore[attr-defined]
    assert options.metrics_staleness_threshold == 2.0  # type: ignore[attr-defined]


CHECK = "grpc.health.v1.Health/Check"


async def _grpcurl(*args: str) -> str:
    proc = await asyncio.create_subprocess_exec(
        str(GRPCURL), "-plaintext", *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await proc.communicate()
    return out.decode()


async def test_standalone_serve_goes_not_serving_to_serving_and_stops_on_sigterm(tmp_path: Path) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        api.server.inject_error(503, verb="list", path_prefix="/api/v1/namespaces/default/pods", times=None)
        grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "epp", "serve", "--secure-serving=false", "--endpoint-selector", "app=x",
            "--endpoint-target-ports", "8000", "--kubeconfig", str(api.kubeconfig), "--bind-address", "127.0.0.1",
            "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port), "--metrics-port", str(metrics_port),
            "--drain-timeout", "0s",  # SIGTERM below: nothing to drain, stop at once
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        try:

            async def readiness(needle: str) -> bool:
                return needle in await _grpcurl("-d", '{"service":"readiness"}', f"127.0.0.1:{health_port}", CHECK)

            await wait_until(lambda: readiness("NOT_SERVING"), timeout=30, message="NOT_SERVING while unsynced")
            liveness = await _grpcurl("-d", '{"service":"liveness"}', f"127.0.0.1:{health_port}", CHECK)
            assert '"status": "SERVING"' in liveness
            api.server.clear_faults()
            await wait_until(lambda: readiness('"status": "SERVING"'), timeout=30, message="SERVING after sync")
            ext_proc = "envoy.service.ext_proc.v3.ExternalProcessor"
            assert ext_proc in await _grpcurl(f"127.0.0.1:{grpc_port}", "list")
            # Reflection serves the build's Envoy files (renamed into epp.extproc.envoy_api) with every
            # import resolvable: grpcurl loads them all to describe the service.
            service = await _grpcurl(f"127.0.0.1:{grpc_port}", "describe", ext_proc)
            assert "rpc Process ( stream .envoy.service.ext_proc.v3.ProcessingRequest )" in service, service
        finally:
            proc.send_signal(signal.SIGTERM)
            rc = await asyncio.wait_for(proc.wait(), 30)
        assert rc == 0
