"""Live configuration: good reloads swap, bad ones keep the last good config and say why."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

from epp.clock import ManualClock
from epp.config.reload import ConfigHolder, ConfigWatcher
from epp.telemetry.metrics import EppMetrics
from epp_sim.waits import wait_until


def _load(text: str) -> dict[str, int]:
    data = yaml.safe_load(text)
    if not isinstance(data, dict) or not isinstance(data.get("weight"), int):
        raise ValueError(f"weight: must be an integer, got {data!r}")
    return {"weight": data["weight"]}


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Path, ConfigHolder[dict[str, int]], ConfigWatcher[dict[str, int]], EppMetrics]:
    path = tmp_path / "config.yaml"
    path.write_text("weight: 1\n")
    holder = ConfigHolder(_load(path.read_text()))
    metrics = EppMetrics()
    watcher = ConfigWatcher(str(path), holder, _load, clock=ManualClock(), metrics=metrics)
    return path, holder, watcher, metrics


async def test_good_bad_and_recovered(
    setup: tuple[Path, ConfigHolder[dict[str, int]], ConfigWatcher[dict[str, int]], EppMetrics],
) -> None:
    path, holder, watcher, metrics = setup
    await watcher.start("weight: 1\n")
    try:
        assert await watcher.check_now() is None  # unchanged
        path.write_text("weight: 5\n")
        assert await watcher.check_now() is True
        assert holder.current == {"weight": 5}
        assert holder.generation == 2

        path.write_text("weight: [broken\n")
        assert await watcher.check_now() is False
        assert holder.current == {"weight": 5}  # last good kept
        assert "weight" in watcher.last_error or "expected" in watcher.last_error
        assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "rejected"}) == 1
        assert metrics.registry.get_sample_value("epp_config_last_reload_successful") == 0
        assert await watcher.check_now() is None  # the same bad file is not reported twice
        assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "rejected"}) == 1

        path.unlink()
        assert await watcher.check_now() is False
        assert "cannot read" in watcher.last_error

        path.write_text("weight: 7\n")
        assert await watcher.check_now() is True
        assert holder.current == {"weight": 7}
        assert metrics.registry.get_sample_value("epp_config_last_reload_successful") == 1
        assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "success"}) == 2
    finally:
        await watcher.stop()


async def test_symlink_swap_like_a_configmap(tmp_path: Path) -> None:
    """Kubernetes swaps ``..data`` to a new directory; the mounted file path never changes."""
    for version, weight in (("v1", 1), ("v2", 9)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "config.yaml").write_text(f"weight: {weight}\n")
    (tmp_path / "..data").symlink_to("v1")
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    holder = ConfigHolder(_load("weight: 1\n"))
    clock = ManualClock()
    watcher = ConfigWatcher(str(tmp_path / "config.yaml"), holder, _load, clock=clock, metrics=EppMetrics())
    await watcher.start("weight: 1\n")
    try:
        os.symlink("v2", tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
        await wait_until(lambda: clock.sleepers == 1)
        clock.advance(1.0)  # the watcher's poll interval
        await wait_until(lambda: holder.current == {"weight": 9}, timeout=5)
    finally:
        await watcher.stop()
    await asyncio.sleep(0)
