"""Recording HTTP backends on distinct loopback addresses, for the data-plane tests."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web

SSE_FIRST = b"data: one\n\n"
SSE_REST = b"data: two\n\ndata: [DONE]\n\n"


@dataclass
class Seen:
    method: str
    path: str
    body: bytes
    headers: dict[str, str]


@dataclass
class Backend:
    """An aiohttp server that records every request; ``/v1/echo`` echoes, ``/v1/stream`` streams SSE.

    The stream sends its first event, then waits for ``release`` before sending the rest, so a
    test can prove the first chunk reached the client while the backend was still holding the
    second.
    """

    host: str
    port: int = 0
    seen: list[Seen] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: web.AppRunner | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    async def _echo(self, request: web.Request) -> web.Response:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path, body, dict(request.headers)))
        return web.Response(body=body, headers={"x-backend": self.host})

    async def _stream(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append(Seen(request.method, request.path, body, dict(request.headers)))
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", "x-backend": self.host})
        await resp.prepare(request)
        await resp.write(SSE_FIRST)
        await self.release.wait()
        await resp.write(SSE_REST)
        await resp.write_eof()
        return resp

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/v1/echo", self._echo)
        app.router.add_route("*", "/v1/stream", self._stream)
        self._runner = web.AppRunner(app, shutdown_timeout=1.0)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    async def stop(self) -> None:
        self.release.set()
        if self._runner is not None:
            await self._runner.cleanup()


@dataclass
class Backends:
    decoy: Backend
    target: Backend
