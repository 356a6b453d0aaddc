"""``epp serve``'s logging flags on the real process: JSON lines from start to exit, and notes once.

``--zap-encoder json`` must make *every* stderr line one JSON object, whoever wrote it: our
records with their ``extra=`` fields, the libraries' records (kr8s, httpx at debug), a start-up
failure with its traceback, and a flag error. Flags that only mean something to upstream's Go
binary are each noted exactly once at start.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from serve_process import run_serve, serve_process

from epp.extproc import pb
from epp_sim.kube_objects import inference_pool
from epp_sim.stack.cluster import FakeCluster
from epp_sim.stack.manifests import CRDS_DIR


def _records(lines: list[str]) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in lines]  # a line that is not JSON fails here, naming itself
    assert records and all(isinstance(r, dict) and {"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    return records


async def test_json_lines_from_start_to_exit_with_fields_library_records_and_notes_once(
    epp_cluster: FakeCluster,
) -> None:
    await epp_cluster.apply_manifests(CRDS_DIR)
    await epp_cluster.apply(inference_pool("v1", "p", {"app": "m"}, 8000))
    async with serve_process(
        "--pool-name=p",
        f"--kubeconfig={epp_cluster.kubeconfig}",
        "--zap-encoder=json",
        "--zap-log-level=debug",
        "-v=1",  # --zap-log-level wins over -v
        "--zap-devel=false",
        "--zap-time-encoding=epoch",
        "--zap-stacktrace-level=error",
    ) as serve:
        await serve.wait_serving()
        # A plaintext client on the TLS port: gRPC's C core would print its own "Handshake failed" line.
        async with grpc.aio.insecure_channel(f"127.0.0.1:{serve.grpc_port}") as plaintext:
            with pytest.raises(grpc.aio.AioRpcError):
                await pb.HealthStub(plaintext).Check(pb.HealthCheckRequest(), timeout=5)
    records = _records(serve.stderr)
    assert {r["level"] for r in records} >= {"debug", "info", "warning"}
    serving = next(r for r in records if r["msg"] == "epp serving")
    assert serving["grpc_port"] == serve.grpc_port and serving["pools"] == ["default/p"]
    assert any(r["logger"].startswith(("kr8s", "httpx", "httpcore")) for r in records)
    notes = [r["flag"] for r in records if r["msg"] == "flag has no effect"]
    for flag in ("--zap-devel", "--zap-time-encoding", "--zap-stacktrace-level", "--enable-pprof"):
        assert sum(note.startswith(f"{flag}") for note in notes) == 1, notes
    assert records.index(next(r for r in records if r["msg"] == "flag has no effect")) == 0  # at start


async def test_a_failed_start_is_one_json_record_carrying_its_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "absent.yaml"
    rc, lines = await run_serve(
        "--pool-name=p", f"--config-file={missing}", "--zap-encoder=json", "--zap-log-level=debug", "--enable-pprof=0"
    )
    assert rc == 1
    failed = [r for r in _records(lines) if r["level"] == "error"]
    assert len(failed) == 1 and str(missing) in failed[0]["msg"]
    assert "Traceback (most recent call last)" in failed[0]["exc"] and "FileNotFoundError" in failed[0]["exc"]


async def test_a_flag_error_is_logged_in_the_encoder_asked_for() -> None:
    rc, lines = await run_serve("--pool-name=p", "--pool-group=example.com", "--zap-encoder", '"json"')
    assert rc == 2
    (record,) = _records(lines)
    assert record["level"] == "error" and "--pool-group: must be" in record["error"]
    rc, lines = await run_serve("--pool-name=p", "--zap-encoder=yaml")
    assert rc == 2 and lines[0].startswith("ts=") and "--zap-encoder: must be json or console" in lines[0]
