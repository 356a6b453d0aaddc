"""The epp distribution's one build step: compile ``protos/epp/v1/*.proto`` into ``epp/api/v1/``.

Everything else is declared in ``pyproject.toml``. The generated modules are never committed:
``build_py`` (which a wheel build and ``pip install -e`` both run) writes them into the source
tree first, so a wheel packs them and an editable install imports them in place; ``python
setup.py build_protos`` (what ``scripts/bootstrap`` runs) regenerates them alone. They land in
``epp/api/v1`` rather than a top-level package so they never collide with another wheel's (the
platform note on the ``envoy`` package); the proto package stays ``epp.v1``.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import Command, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
PROTOS = ROOT / "protos" / "epp" / "v1"
OUT_PACKAGE = "epp/api/v1"


def generate_protos() -> list[Path]:
    """Run grpcio-tools' protoc over every proto; returns the files written. Fails loudly."""
    import grpc_tools
    from grpc_tools import protoc

    protos = sorted(PROTOS.glob("*.proto"))
    if not protos:
        raise RuntimeError(f"no .proto files under {PROTOS}")
    include = Path(grpc_tools.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{OUT_PACKAGE}={PROTOS}",  # the import path decides the Python package: epp.api.v1
        f"-I{include}",
        f"--python_out={ROOT}",
        f"--pyi_out={ROOT}",
        f"--grpc_python_out={ROOT}",
        *(f"{OUT_PACKAGE}/{p.name}" for p in protos),
    ]
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {PROTOS}")
    out = ROOT / OUT_PACKAGE
    return sorted(out.glob("*_pb2*.py*"))


class BuildProtos(Command):
    """``python setup.py build_protos``: regenerate ``epp/api/v1`` from ``protos/``."""

    description = "compile protos/epp/v1/*.proto into epp/api/v1"
    user_options: list[tuple[str, str | None, str]] = []

    def initialize_options(self) -> None:
        pass

    def finalize_options(self) -> None:
        pass

    def run(self) -> None:
        generate_protos()


class BuildPy(build_py):
    """Generate the protos before the package's files are collected."""

    def run(self) -> None:
        self.run_command("build_protos")
        super().run()


setup(cmdclass={"build_protos": BuildProtos, "build_py": BuildPy})
