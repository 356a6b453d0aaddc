"""Background tasks: guarded (failures logged at once), held until they end, stopped one way; nothing
in ``epp/`` starts a task but through ``epp.tasks``; a Service that fails to start is stopped."""

from __future__ import annotations

import ast
import asyncio
import gc
import logging
from pathlib import Path

import pytest

from epp.tasks import Service, TaskSet, cancel_and_wait, start_guarded
from epp_sim.waits import wait_until

EPP = Path(__file__).resolve().parents[1] / "epp"
_STARTERS = {"create_task", "ensure_future"}


class _Flaky(Service):
    def __init__(self) -> None:
        self.events: list[str] = []

    async def start(self) -> None:
        self.events.append("start")
        raise OSError("port in use")

    async def stop(self) -> None:
        self.events.append("stop")


def _failures(caplog: pytest.LogCaptureFixture, name: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "epp.tasks" and getattr(r, "task", None) == name]


async def test_failed_start_is_stopped_and_the_error_propagates() -> None:
    service = _Flaky()
    with pytest.raises(OSError, match="port in use"):
        async with service:
            pytest.fail("the body must not run")
    assert service.events == ["start", "stop"]


async def test_guarded_task_failure_is_logged_at_once_and_cancel_is_idempotent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def boom() -> None:
        raise ValueError("broken loop")

    task = start_guarded(boom(), "boom-task")
    await wait_until(lambda: any(r.exc_info for r in _failures(caplog, "boom-task")))
    with pytest.raises(ValueError):
        task.result()

    forever = start_guarded(asyncio.Event().wait(), name="forever")
    await cancel_and_wait(forever)
    await cancel_and_wait(forever)
    assert forever.cancelled()


async def test_a_forever_task_that_returns_is_reported_and_a_quiet_failure_is_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def returns() -> None:
        return None

    async def fails() -> None:
        raise ConnectionResetError("the stream is gone")

    tasks = TaskSet()
    tasks.start(returns(), "loop", forever=True)
    tasks.start(fails(), "send", quiet=True)
    tasks.start(returns(), "one-shot")
    await tasks.wait()
    assert [r.getMessage() for r in _failures(caplog, "loop")] == [
        "background task ended, though it should run until stopped"
    ]
    assert _failures(caplog, "send") == [] and _failures(caplog, "one-shot") == []
    with caplog.at_level(logging.ERROR, logger="asyncio"):
        gc.collect()  # a failure nobody took would be reported here as "never retrieved"
    assert [r for r in caplog.records if r.name == "asyncio"] == []


async def test_a_task_set_holds_each_task_until_it_ends_and_stops_them_together() -> None:
    tasks = TaskSet()
    release = asyncio.Event()
    cleaned: list[str] = []

    async def slow_to_stop(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()  # still running for a while after being cancelled
            cleaned.append(name)

    quick = tasks.start(asyncio.sleep(0), "quick")
    a = tasks.start(slow_to_stop("a"), "a")
    tasks.start(slow_to_stop("b"), "b")
    await quick
    await wait_until(lambda: len(tasks) == 2, message="the finished task is let go")
    a.cancel()  # cancelled by its owner (an endpoint left): held until it has finished
    await asyncio.sleep(0)
    assert len(tasks) == 2 and not a.done()
    stopping = asyncio.create_task(tasks.stop())
    await asyncio.sleep(0)
    assert not stopping.done()  # stop waits for both to finish
    release.set()
    await stopping
    assert sorted(cleaned) == ["a", "b"] and len(tasks) == 0


async def test_cancel_and_wait_lets_the_callers_own_cancellation_through() -> None:
    release = asyncio.Event()

    async def slow_to_stop() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await release.wait()

    target = start_guarded(slow_to_stop(), "slow")
    caller = asyncio.create_task(cancel_and_wait(target))
    await asyncio.sleep(0)
    caller.cancel()
    with pytest.raises(asyncio.CancelledError):
        await caller
    release.set()
    await cancel_and_wait(target)


def test_no_module_of_epp_starts_a_task_but_through_epp_tasks() -> None:
    starters = []
    for path in sorted(EPP.rglob("*.py")):
        if path == EPP / "tasks.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in _STARTERS:
                starters.append(f"{path.relative_to(EPP.parent)}:{node.lineno} {name}")
    assert starters == []


async def test_a_cancellation_taken_back_is_delivered_again() -> None:
    """A library that catches the cancellation and ``uncancel``s it must not leave the stop waiting forever."""
    swallowed = asyncio.Event()

    async def stubborn() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            assert task is not None
            task.uncancel()
            swallowed.set()
        await asyncio.sleep(3600)  # carries on as if never cancelled

    task = asyncio.create_task(stubborn())
    await asyncio.sleep(0)
    await asyncio.wait_for(cancel_and_wait(task), 10)
    assert swallowed.is_set() and task.cancelled()
