"""Live configuration: good reloads are applied, bad ones keep the last good config and say why."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
import yaml

from epp.clock import ManualClock
from epp.config.reload import ConfigStatus, ConfigWatcher
from epp.telemetry.metrics import EppMetrics
from epp_sim.waits import wait_until


class Target:
    """What the runtime is to the watcher: ``apply`` loads a text and puts it in force, or raises to refuse it."""

    def __init__(self) -> None:
        self.current = {"weight": 1}
        self.calls = 0

    async def apply(self, text: str) -> None:
        self.calls += 1
        await asyncio.sleep(0)  # the runtime's load awaits a worker thread
        data = yaml.safe_load(text)
        if not isinstance(data, dict) or not isinstance(data.get("weight"), int):
            raise ValueError(f"weight: must be an integer, got {data!r}")
        self.current = {"weight": data["weight"]}


Setup = tuple[Path, Target, ConfigWatcher, ConfigStatus, EppMetrics]


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    path = tmp_path / "config.yaml"
    path.write_text("weight: 1\n")
    target, status, metrics = Target(), ConfigStatus("--config-file config.yaml"), EppMetrics()
    watcher = ConfigWatcher(str(path), target.apply, status, clock=ManualClock(), metrics=metrics)
    return path, target, watcher, status, metrics


async def test_good_bad_and_recovered(setup: Setup) -> None:
    path, target, watcher, status, metrics = setup
    assert not status.watched
    await watcher.start("weight: 1\n")
    try:
        assert status.watched and status.generation == 1
        assert await watcher.check_now() is None  # unchanged: not even loaded
        assert target.calls == 0
        path.write_text("weight: 5\n")
        assert await watcher.check_now() is True
        assert target.current == {"weight": 5}
        assert status.generation == 2 and status.last_error == ""

        path.write_text("weight: [broken\n")
        assert await watcher.check_now() is False
        assert target.current == {"weight": 5}  # last good kept
        assert status.generation == 2
        assert "weight" in status.last_error or "expected" in status.last_error
        assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "rejected"}) == 1
        assert metrics.registry.get_sample_value("epp_config_last_reload_successful") == 0
        assert await watcher.check_now() is None  # the same bad file is not reported (nor loaded) twice
        assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "rejected"}) == 1
        assert target.calls == 2

        path.unlink()
        assert await watcher.check_now() is False
        assert "cannot read" in status.last_error

        path.write_text("weight: 7\n")
        assert await watcher.check_now() is True
        assert target.current == {"weight": 7} and status.generation == 3 and status.last_error == ""
        assert metrics.registry.get_sample_value("epp_config_last_reload_successful") == 1
        assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "success"}) == 2
    finally:
        await watcher.stop()


async def test_a_stop_during_a_load_applies_nothing(setup: Setup, tmp_path: Path) -> None:
    """The watcher is stopped while its reload waits (on the worker thread's load): nothing is counted as
    reloaded or rejected, and the watcher ends."""
    path, _, _, status, metrics = setup
    started, release = asyncio.Event(), asyncio.Event()

    async def slow_apply(text: str) -> None:
        started.set()
        await release.wait()

    watcher = ConfigWatcher(str(path), slow_apply, status, clock=ManualClock(), metrics=metrics)
    await watcher.start("weight: 1\n")
    path.write_text("weight: 2\n")
    check = asyncio.create_task(watcher.check_now(), name="check")
    await started.wait()
    check.cancel()
    with pytest.raises(asyncio.CancelledError):
        await check
    await watcher.stop()
    assert status.generation == 1 and status.last_error == ""
    assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "success"}) is None
    assert metrics.registry.get_sample_value("epp_config_reloads_total", {"result": "rejected"}) is None


async def test_symlink_swap_like_a_configmap(tmp_path: Path) -> None:
    """Kubernetes swaps ``..data`` to a new directory; the mounted file path never changes."""
    for version, weight in (("v1", 1), ("v2", 9)):
        (tmp_path / version).mkdir()
        (tmp_path / version / "config.yaml").write_text(f"weight: {weight}\n")
    (tmp_path / "..data").symlink_to("v1")
    (tmp_path / "config.yaml").symlink_to("..data/config.yaml")
    target = Target()
    clock = ManualClock()
    status = ConfigStatus("--config-file config.yaml")
    watcher = ConfigWatcher(str(tmp_path / "config.yaml"), target.apply, status, clock=clock, metrics=EppMetrics())
    await watcher.start("weight: 1\n")
    try:
        os.symlink("v2", tmp_path / "..data_tmp")
        os.replace(tmp_path / "..data_tmp", tmp_path / "..data")
        await wait_until(lambda: clock.sleepers == 1)
        clock.advance(1.0)  # the watcher's poll interval
        await wait_until(lambda: target.current == {"weight": 9}, timeout=5)
    finally:
        await watcher.stop()
    await asyncio.sleep(0)
