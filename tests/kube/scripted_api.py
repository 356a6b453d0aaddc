"""A scripted loopback API server for informer protocol tests (pages, bookmarks, ERROR events).

The fake API server (``epp_sim.apiserver``) is the realistic peer; this one answers exactly what a
test scripts, so protocol corners (a 410 ERROR event, a bookmark, a 500, a watch that closes at
once) can be produced on demand and the requests the informer made can be asserted.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

Obj = dict[str, Any]

HOLD = "hold"  # a watch script ending in HOLD stays open until the test releases it


@dataclass
class ScriptedApi:
    """List answers and watch scripts, consumed in order; every request is recorded."""

    lists: list[tuple[int, Obj]] = field(default_factory=list)
    watches: list[tuple[int, list[Obj | str]]] = field(default_factory=list)
    requests: list[dict[str, str]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    kubeconfig: str = ""

    def watch_requests(self) -> list[dict[str, str]]:
        return [r for r in self.requests if r.get("watch") == "true"]

    def list_requests(self) -> list[dict[str, str]]:
        return [r for r in self.requests if r.get("watch") != "true"]

    async def _pods(self, request: web.Request) -> web.StreamResponse:
        params = dict(request.query)
        self.requests.append(params)
        if params.get("watch") != "true":
            status, body = self.lists.pop(0) if self.lists else (500, {"kind": "Status", "code": 500})
            return web.json_response(body, status=status)
        status, lines = self.watches.pop(0) if self.watches else (200, [HOLD])
        if status != 200:
            return web.json_response({"kind": "Status", "code": status, "message": "scripted"}, status=status)
        response = web.StreamResponse()
        response.content_type = "application/json"
        await response.prepare(request)
        for line in lines:
            if line == HOLD:
                await self.release.wait()
                break
            await response.write(json.dumps(line).encode() + b"\n")
        return response


def page(items: list[Obj], rv: str, cont: str = "") -> tuple[int, Obj]:
    meta: Obj = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return 200, {"kind": "PodList", "apiVersion": "v1", "metadata": meta, "items": items}


def event(kind: str, obj: Obj) -> Obj:
    return {"type": kind, "object": obj}


def bookmark(rv: str) -> Obj:
    return {"type": "BOOKMARK", "object": {"kind": "Pod", "apiVersion": "v1", "metadata": {"resourceVersion": rv}}}


def error(code: int) -> Obj:
    return {"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "code": code, "reason": "Expired"}}


def write_kubeconfig(path: Path, server: str) -> str:
    path.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "default"}}],
                "current-context": "x",
            }
        )
    )
    return str(path)


@asynccontextmanager
async def scripted_api(tmp_path: Path) -> AsyncIterator[ScriptedApi]:
    """Serve a :class:`ScriptedApi` on 127.0.0.1 (free port) with a kubeconfig pointing at it."""
    api = ScriptedApi()
    app = web.Application()
    app.router.add_get("/api/v1/namespaces/default/pods", api._pods)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    api.kubeconfig = write_kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{port}")
    try:
        yield api
    finally:
        api.release.set()
        await runner.cleanup()
