"""The Dockerfile (no Docker engine here, so it is parsed): two stages, wheels built in the first,
a slim non-root final image with no build tools, `epp serve` as the entrypoint, our three ports."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BUILD_TOOLS = re.compile(r"\b(gcc|g\+\+|clang|make|build-essential|python3-dev|libc6-dev)\b")
RUNTIME_PACKAGES = {"libgomp1"}
"""What the final image may apt-get: LightGBM's OpenMP runtime (the SLO predictor trains with it)."""


@dataclass
class Stage:
    base: str
    alias: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [rest for kw, rest in self.instructions if kw == keyword]


def _instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) with line continuations joined and comments dropped."""
    logical: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        logical.append(current + line)
        current = ""
    assert not current, "dangling line continuation"
    return [(kw.upper(), rest.strip()) for kw, _, rest in (line.partition(" ") for line in logical)]


def _stages(dockerfile: Path = ROOT / "Dockerfile") -> list[Stage]:
    stages: list[Stage] = []
    for keyword, rest in _instructions(dockerfile.read_text()):
        if keyword == "ARG" and not stages:  # a global build argument, for FROM lines
            continue
        if keyword == "FROM":
            parts = rest.split()
            alias = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(parts[0], alias))
        else:
            assert stages, f"{keyword} before FROM"
            stages[-1].instructions.append((keyword, rest))
    return stages


def test_multi_stage_with_wheels_built_in_the_builder() -> None:
    builder, final = _stages()
    assert builder.alias == "builder"
    assert any("pip wheel" in run for run in builder.args("RUN"))
    copied = " ".join(builder.args("COPY")).split()
    # Everything the wheel build reads: setup.py compiles protos/ into epp/api/v1.
    for source in ("pyproject.toml", "setup.py", "protos", "epp"):
        assert source in copied, source
        assert (ROOT / source).exists(), source


def test_final_image_is_slim_non_root_and_installs_only_the_wheels() -> None:
    final = _stages()[-1]
    assert final.base == "python:3.11-slim"
    (user,) = final.args("USER")
    assert user.split(":")[0] not in ("root", "0")
    runs = " ".join(final.args("RUN"))
    assert "from=builder" in runs and "--no-index" in runs
    assert not BUILD_TOOLS.search(runs), runs
    for installed in re.findall(r"apt-get install ([^&]*)", runs):
        assert {w for w in installed.split() if not w.startswith("-")} <= RUNTIME_PACKAGES, installed
    # Nothing from the source tree is copied into the final image.
    assert final.args("COPY") == [] and final.args("ADD") == []


def test_entrypoint_and_ports() -> None:
    final = _stages()[-1]
    (entrypoint,) = final.args("ENTRYPOINT")
    assert json.loads(entrypoint) == ["epp", "serve"]
    ports = {int(p) for expose in final.args("EXPOSE") for p in expose.split()}
    assert ports == {9002, 9003, 9090}


def test_dockerignore_keeps_the_context_small_but_keeps_the_sources() -> None:
    ignored = {
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".git", ".venv", "tests"} <= ignored
    assert not ignored & {"epp", "pyproject.toml", "epp/", "*.py", "README.md"}


def test_a_plugin_image_is_ours_plus_one_pip_install_layer() -> None:
    """docs/plugins.md: deploying a plugin distribution is one ``pip install`` on top of the picker's image."""
    (image,) = _stages(ROOT / "examples" / "zone-plugins" / "Dockerfile")
    assert image.base == "${EPP_IMAGE}"
    (run,) = image.args("RUN")
    assert " pip install --no-cache-dir /src" in run and not BUILD_TOOLS.search(run)
    ours = _stages()[-1].args("USER")
    assert image.args("USER") == ["root", *ours]  # back to the picker's non-root user after the install
    assert image.args("ENTRYPOINT") == [] and image.args("EXPOSE") == []  # `epp serve` and the ports: ours
