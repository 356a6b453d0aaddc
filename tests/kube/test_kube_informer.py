"""The list+watch loop against a scripted loopback server: pages, bookmarks, 410, 5xx, backoff."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from kube_objects import pod
from scripted_api import HOLD, ScriptedApi, bookmark, error, event, page, scripted_api

from epp.clock import ManualClock
from epp.kube.client import Api, KubeConfigError, close_api, make_api
from epp.kube.informer import Backoff, Informer, InformerSettings
from epp.kube.resources import POD
from epp_sim.waits import wait_until

FAST = InformerSettings(backoff=Backoff(initial=0.01, maximum=0.05), watch_timeout=30, request_timeout=5, page_size=2)


def at(name: str, rv: str) -> dict[str, Any]:
    obj = pod(name)
    obj["metadata"]["resourceVersion"] = rv
    return obj


class Recorder:
    def __init__(self, *, fail_first_apply: bool = False) -> None:
        self.resyncs: list[list[str]] = []
        self.events: list[tuple[str, str]] = []
        self._fail = fail_first_apply

    def resync(self, objects: Sequence[dict[str, Any]]) -> None:
        self.resyncs.append([o["metadata"]["name"] for o in objects])

    def apply(self, kind: str, obj: dict[str, Any]) -> None:
        if self._fail:
            self._fail = False
            raise RuntimeError("handler bug")
        self.events.append((kind, obj["metadata"]["name"]))


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[ScriptedApi]:
    async with scripted_api(tmp_path) as s:
        yield s


@pytest.fixture
async def api(server: ScriptedApi) -> AsyncIterator[Api]:
    a = await make_api(server.kubeconfig)
    yield a
    await close_api(a)


async def test_paginated_list_then_watch_from_list_rv_and_bookmarks(server: ScriptedApi, api: Api) -> None:
    server.lists = [page([at("a", "1"), at("b", "2")], "10", cont="tok"), page([at("c", "3")], "11")]
    server.watches = [(200, [event("ADDED", at("d", "12")), bookmark("15")])]
    rec = Recorder()
    informer = Informer(api, POD, rec, namespace="default", settings=FAST)
    informer.start()
    try:
        await wait_until(lambda: len(server.watch_requests()) == 2, message="re-watch after the stream ended")
        assert rec.resyncs == [["a", "b", "c"]]
        assert rec.events == [("ADDED", "d")]
        assert server.list_requests() == [{"limit": "2"}, {"limit": "2", "continue": "tok"}]
        first, second = server.watch_requests()
        timeout = int(first.pop("timeoutSeconds"))
        assert 30 <= timeout < 60, "randomised in [watch_timeout, 2 * watch_timeout)"
        assert first == {"watch": "true", "resourceVersion": "11", "allowWatchBookmarks": "true"}
        assert second["resourceVersion"] == "15"  # the bookmark's
        assert informer.resource_version == "15"
        assert informer.synced.is_set() and informer.lists == 1
    finally:
        await informer.stop()


@pytest.mark.parametrize("gone", ["event", "status"])
async def test_410_relists_and_resyncs(server: ScriptedApi, api: Api, gone: str) -> None:
    server.lists = [page([at("a", "5")], "5"), page([at("b", "9")], "9")]
    if gone == "event":
        server.watches = [(200, [event("MODIFIED", at("a", "6")), error(410)])]
    else:
        server.watches = [(410, [])]
    rec = Recorder()
    informer = Informer(api, POD, rec, namespace="default", settings=FAST)
    informer.start()
    try:
        await wait_until(lambda: len(server.watch_requests()) == 2)
        assert rec.resyncs == [["a"], ["b"]]
        assert informer.lists == 2
        assert server.watch_requests()[1]["resourceVersion"] == "9"
    finally:
        await informer.stop()


async def test_5xx_on_list_retries_without_touching_handler(server: ScriptedApi, api: Api) -> None:
    server.lists = [(500, {"kind": "Status", "code": 500}), (503, {"kind": "Status", "code": 503}), page([], "3")]
    rec = Recorder()
    informer = Informer(api, POD, rec, namespace="default", settings=FAST)
    informer.start()
    try:
        await wait_until(lambda: informer.synced.is_set())
        assert rec.resyncs == [[]]
        assert len(server.list_requests()) == 3
    finally:
        await informer.stop()


@pytest.mark.parametrize("failure", ["http", "event"])
async def test_watch_failure_rewatches_from_same_rv_without_relist(server: ScriptedApi, api: Api, failure: str) -> None:
    server.lists = [page([at("a", "1")], "7")]
    server.watches = [(500, [])] if failure == "http" else [(200, [error(500)])]
    rec = Recorder()
    informer = Informer(api, POD, rec, namespace="default", settings=FAST)
    informer.start()
    try:
        await wait_until(lambda: len(server.watch_requests()) == 2)
        assert [r["resourceVersion"] for r in server.watch_requests()] == ["7", "7"]
        assert informer.lists == 1 and rec.resyncs == [["a"]]
    finally:
        await informer.stop()


async def test_watch_closing_at_once_backs_off(server: ScriptedApi, api: Api) -> None:
    clock = ManualClock()
    server.lists = [page([], "1")]
    server.watches = [(200, []), (200, [HOLD])]
    settings = InformerSettings(backoff=Backoff(initial=1.0, maximum=4.0, jitter=0), clock=clock)
    informer = Informer(api, POD, Recorder(), namespace="default", settings=settings)
    informer.start()
    try:
        await wait_until(lambda: clock.sleepers == 1, message="informer parked in backoff")
        assert len(server.watch_requests()) == 1
        clock.advance(1.0)
        await wait_until(lambda: len(server.watch_requests()) == 2)
    finally:
        await informer.stop()


async def test_handler_bug_relists_after_backoff(server: ScriptedApi, api: Api) -> None:
    server.lists = [page([], "1"), page([at("a", "4")], "4")]
    server.watches = [(200, [event("ADDED", at("a", "2")), HOLD])]
    rec = Recorder(fail_first_apply=True)
    informer = Informer(api, POD, rec, namespace="default", settings=FAST)
    informer.start()
    try:
        await wait_until(lambda: informer.lists == 2)
        assert rec.resyncs == [[], ["a"]]
    finally:
        await informer.stop()


def test_backoff_is_capped_and_validated() -> None:
    import random

    b = Backoff(initial=0.5, maximum=4.0, factor=2.0, jitter=0.0)
    assert [b.delay(i, random.Random(1)) for i in range(6)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    jittered = Backoff(initial=1.0, maximum=1.0, jitter=0.2).delay(3, random.Random(7))
    assert 0.8 <= jittered <= 1.2
    with pytest.raises(ValueError, match="invalid backoff"):
        Backoff(initial=0)


async def test_make_api_rejects_missing_kubeconfig(tmp_path: Path) -> None:
    with pytest.raises(KubeConfigError, match="no such file"):
        await make_api(str(tmp_path / "absent"))
