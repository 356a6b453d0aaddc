"""The HTTP client plugins are handed (``SessionClient``), against a real aiohttp server on loopback:
any status is an answer, a refused connection is an ``HttpError`` naming the URL, a slow server a
``TimeoutError``, and once closed (the picker stopping) it opens no new session."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from epp.datalayer.http_client import SessionClient
from epp.framework.http import HttpError

HOST = "127.0.0.3"


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, asyncio.Event]]:
    """``/echo`` answers 201 with what it was sent and how; ``/slow`` answers once the event is set."""
    release = asyncio.Event()

    async def echo(request: web.Request) -> web.Response:
        seen = f"{request.content_type} {request.headers['Accept']} ".encode() + await request.read()
        return web.Response(status=201, body=seen)

    async def slow(request: web.Request) -> web.Response:
        await release.wait()
        return web.Response(text="late")

    app = web.Application()
    app.router.add_post("/echo", echo)
    app.router.add_post("/slow", slow)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, HOST, 0)
    await site.start()
    try:
        yield f"http://{HOST}:{runner.addresses[0][1]}", release
    finally:
        release.set()
        await runner.cleanup()


async def test_an_answer_of_any_status_is_returned_with_its_body(server: tuple[str, asyncio.Event]) -> None:
    url, _ = server
    client = SessionClient()
    try:
        response = await client.post(url + "/echo", b'{"a":1}', content_type="application/json", timeout=5)
        assert (response.status, response.body) == (201, b'application/json application/json {"a":1}')
        missing = await client.post(url + "/nowhere", b"", content_type="application/json", timeout=5)
        assert missing.status == 404
    finally:
        await client.aclose()


async def test_no_answer_is_an_http_error_or_a_timeout(server: tuple[str, asyncio.Event]) -> None:
    url, _ = server
    client = SessionClient()
    try:
        with pytest.raises(HttpError, match=r"POST http://127\.0\.0\.1:9/x: ClientConnectorError"):
            await client.post("http://127.0.0.1:9/x", b"", content_type="application/json", timeout=5)
        with pytest.raises(TimeoutError):
            await client.post(url + "/slow", b"", content_type="application/json", timeout=0.1)
        answered = await client.post(url + "/echo", b"", content_type="text/plain", timeout=5)
        assert answered.status == 201  # the client is still usable after both
    finally:
        await client.aclose()


async def test_once_closed_no_session_is_opened_again(server: tuple[str, asyncio.Event]) -> None:
    url, _ = server
    client = SessionClient()
    await client.post(url + "/echo", b"", content_type="application/json", timeout=5)
    await client.aclose()
    await client.aclose()  # safe twice
    with pytest.raises(HttpError, match="closed"):
        await client.post(url + "/echo", b"", content_type="application/json", timeout=5)
