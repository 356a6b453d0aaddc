"""The picker ships alone: what the two wheels hold, and what ``epp serve`` / ``epp autoscale`` import."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from epp import cli
from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.ports import free_port
from epp_sim.waits import wait_until

ROOT = Path(__file__).resolve().parents[1]
TOOLING = "epp_sim"


def _build_wheel(project: Path, out: Path) -> dict[str, bytes]:
    """Build ``project``'s wheel as pip would; its files by name (contents kept for the metadata)."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(project)],
        check=True,
        capture_output=True,
    )
    (wheel,) = out.glob("*.whl")
    with zipfile.ZipFile(wheel) as z:
        return {n: z.read(n) if n.endswith(".txt") else b"" for n in z.namelist()}


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, bytes]]:
    base = tmp_path_factory.mktemp("wheels")
    return {
        "epp": _build_wheel(ROOT, base / "epp"),
        "epp-sim": _build_wheel(ROOT / "epp-sim", base / "epp-sim"),
    }


def _entry_points(files: dict[str, bytes]) -> str:
    return next(v for n, v in files.items() if n.endswith(".dist-info/entry_points.txt")).decode()


def test_picker_wheel_holds_the_picker_and_nothing_else(wheels: dict[str, dict[str, bytes]]) -> None:
    names = list(wheels["epp"])
    assert "epp/runtime.py" in names and "epp/autoscale/controller.py" in names
    assert "epp/py.typed" in names  # PEP 561: a plugin author's mypy reads epp.plugin_api's types
    # The epp.v1 API's modules, compiled from protos/ by the wheel build itself.
    assert {"epp/api/v1/endpoints_pb2.py", "epp/api/v1/explain_pb2_grpc.py", "epp/api/v1/config_pb2.py"} <= set(names)
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"epp", "epp-0.1.0.dist-info"}, tops
    tooling = [n for n in names if re.search(r"^epp/(sim|dev|bench)/|^epp/testing\.py$|^epp/extproc/client\.py$", n)]
    assert tooling == []
    # Only the console script: the tooling's commands are registered by epp-sim.
    assert _entry_points(wheels["epp"]).split() == ["[console_scripts]", "epp", "=", "epp.cli:main"]


def test_tooling_wheel_carries_its_commands_and_the_manifests(wheels: dict[str, dict[str, bytes]]) -> None:
    names = list(wheels["epp-sim"])
    assert {n.split("/", 1)[0] for n in names} == {"epp_sim", "epp_sim-0.1.0.dist-info"}
    for expected in (
        "epp_sim/apiserver/server.py",
        "epp_sim/modelserver/engine.py",
        "epp_sim/dev/command.py",
        "epp_sim/bench/command.py",
        "epp_sim/pytest_plugin.py",
        "epp_sim/manifests/crds/inference.networking.k8s.io_inferencepools.yaml",
        "epp_sim/manifests/samples/inferencepool.yaml",
    ):
        assert expected in names
    assert not [n for n in names if n.startswith("epp/")]
    entry_points = _entry_points(wheels["epp-sim"])
    for line in (
        "sim = epp_sim.commands:add_sim_parser",
        "dev = epp_sim.dev.command:add_parser",
        "epp_sim = epp_sim.pytest_plugin",
    ):
        assert line in entry_points


def test_a_missing_tooling_distribution_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_tooling_commands", dict)
    assert cli.main(["dev", "--pods", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "epp-sim distribution, which is not installed" in err


def test_the_tooling_commands_are_discovered() -> None:
    help_text = cli.build_parser().format_help()
    for name in ("serve", "autoscale", "sim", "dev", "bench"):
        assert name in help_text


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` lines: ``import time: self | cumulative | name``."""
    names = set()
    for line in stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip())
    return names


async def _serve_imports(kubeconfig: Path, *preamble: str) -> set[str]:
    """Run ``epp serve`` (standalone) with ``-X importtime`` until SERVING, stop it, return its imports."""
    health, grpc_port, metrics = free_port(), free_port(), free_port()
    code = "; ".join((*preamble, "import sys", "from epp.cli import main", "sys.exit(main())"))
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-X", "importtime", "-c", code, "serve", "--secure-serving=false",
        "--endpoint-selector", "app=x", "--endpoint-target-ports", "8000", "--kubeconfig", str(kubeconfig),
        "--bind-address", "127.0.0.1", "--grpc-port", str(grpc_port), "--grpc-health-port", str(health),
        "--metrics-port", str(metrics), "--drain-timeout=0s",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE, start_new_session=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stderr is not None
    lines: list[str] = []

    async def read() -> None:
        assert proc.stderr is not None
        async for raw in proc.stderr:
            lines.append(raw.decode(errors="replace"))

    reader = asyncio.create_task(read())
    try:
        await wait_until(
            lambda: any("readiness changed" in ln and "ready=True" in ln for ln in lines), timeout=30, message="SERVING"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        await reader
    return _imported("".join(lines))


async def test_serve_imports_no_tooling(tmp_path: Path) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        clean = await _serve_imports(api.kubeconfig)
        # The same check on a process that did load a simulator: it must see it.
        dirty = await _serve_imports(api.kubeconfig, "import epp_sim.modelserver")
    assert "epp.runtime" in clean and "epp.extproc.stream" in clean
    assert sorted(n for n in clean if n.split(".")[0] == TOOLING) == []
    # --tracing is on by default, but with no exporter configured the OTel SDK is never imported.
    assert "epp.telemetry.tracing" in clean and not [n for n in clean if n.split(".")[0] == "opentelemetry"]
    assert "epp_sim.modelserver" in dirty


async def test_autoscale_imports_no_tooling(tmp_path: Path) -> None:
    crd = yaml.safe_load((ROOT / "manifests" / "autoscaler" / "crd.yaml").read_text())
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api:
        api.server.store.create("customresourcedefinitions", crd)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-X", "importtime", "-m", "epp", "autoscale", "--once", "--kubeconfig", str(api.kubeconfig),
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()[-2000:]
    imported = _imported(err.decode())
    assert "epp.autoscale.controller" in imported
    assert sorted(n for n in imported if n.split(".")[0] == TOOLING) == []
