"""The scraper's keep-alive HTTP/1.1 GET against scripted servers: framing, reuse, errors, HTTPS."""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from model_server_tls import server_tls as model_server_tls

from epp.datalayer.metrics_fetch import FetchError, MetricsConnection, tls_context
from epp_sim.waits import wait_until

Answer = Callable[[int], bytes]  # request number on this connection → raw response bytes


@asynccontextmanager
async def scripted(
    answer: Answer, *, close_after: int | None = None, tls: ssl.SSLContext | None = None
) -> AsyncIterator[tuple[int, list[int]]]:
    """A server on 127.0.0.2 answering each GET with ``answer(n)``; yields its port and per-connection counts."""
    connections: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append(0)
        index = len(connections) - 1
        try:
            while True:
                await reader.readuntil(b"\r\n\r\n")
                connections[index] += 1
                writer.write(answer(connections[index]))
                await writer.drain()
                if close_after is not None and connections[index] >= close_after:
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.2", 0, ssl=tls)
    try:
        yield server.sockets[0].getsockname()[1], connections
    finally:
        server.close()
        await server.wait_closed()


def conn(port: int, max_body: int = 1 << 20) -> MetricsConnection:
    return MetricsConnection("127.0.0.2", port, "/metrics", max_body=max_body)


def fixed(body: bytes, *, status: str = "200 OK", extra: bytes = b"") -> Answer:
    return lambda n: b"HTTP/1.1 " + status.encode() + b"\r\nContent-Length: %d\r\n" % len(body) + extra + b"\r\n" + body


async def test_content_length_body_and_one_connection_reused() -> None:
    async with scripted(fixed(b"vllm:num_requests_waiting 3\n")) as (port, connections):
        c = conn(port)
        for _ in range(3):
            assert await c.get() == b"vllm:num_requests_waiting 3\n"
        c.close()
    assert connections == [3]


async def test_chunked_body_with_trailers() -> None:
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nX-T: 1\r\n\r\n"
    )
    async with scripted(lambda n: chunked) as (port, connections):
        c = conn(port)
        assert await c.get() == b"hello world"
        assert await c.get() == b"hello world"
        c.close()
    assert connections == [2]


async def test_connection_close_and_http10_reconnect() -> None:
    async with scripted(fixed(b"x", extra=b"Connection: close\r\n"), close_after=1) as (port, connections):
        c = conn(port)
        assert await c.get() == b"x"
        assert await c.get() == b"x"
        c.close()
    assert connections == [1, 1]
    http10 = b"HTTP/1.0 200 OK\r\n\r\nunframed body"
    async with scripted(lambda n: http10, close_after=1) as (port, _):
        c = conn(port)
        assert await c.get() == b"unframed body"
        c.close()


async def test_errors_name_the_problem_and_drop_the_connection() -> None:
    async with scripted(fixed(b"nope", status="503 Service Unavailable")) as (port, _):
        with pytest.raises(FetchError, match="HTTP 503") as e:
            await conn(port).get()
        assert e.value.reason == "http" and not e.value.unreachable
    async with scripted(fixed(b"y" * 100)) as (port, _):
        with pytest.raises(FetchError, match="exceeds 10 bytes"):
            await conn(port, max_body=10).get()
    async with scripted(lambda n: b"SSH-2.0-OpenSSH\r\n\r\n") as (port, _):
        with pytest.raises(FetchError, match="not an HTTP/1.x answer"):
            await conn(port).get()
    async with scripted(lambda n: b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nshort", close_after=1) as (port, _):
        with pytest.raises(FetchError, match="connection lost mid-body") as e:
            await conn(port).get()
        assert e.value.reason == "connect"
    c = MetricsConnection("127.0.0.2", 1, "/metrics", max_body=10)
    with pytest.raises(FetchError, match="ConnectionRefusedError") as e:
        await c.get()
    assert e.value.reason == "connect" and e.value.unreachable


async def test_a_kept_alive_connection_the_server_dropped_is_retried_once_on_a_new_one() -> None:
    # The server closes after each answer without saying so (an idle timeout, a restart): the
    # next GET finds the old connection dead and must not report the endpoint unreachable.
    async with scripted(fixed(b"ok"), close_after=1) as (port, connections):
        c = conn(port)
        assert await c.get() == b"ok"
        await wait_until(lambda: not c.connected)
        assert await c.get() == b"ok"
        assert connections == [1, 1]
    with pytest.raises(FetchError) as e:  # gone for good: the retry is refused too
        await c.get()
    assert e.value.unreachable


async def test_a_kept_alive_connection_closed_as_the_get_is_sent_is_retried_once() -> None:
    # The server reads the second request and closes without a byte of answer (it restarted,
    # or timed the connection out just then): the GET goes again on a new connection.
    async with scripted(lambda n: b"" if n == 2 else fixed(b"ok")(n), close_after=2) as (port, connections):
        c = conn(port)
        assert await c.get() == b"ok"
        assert await c.get() == b"ok"
        assert connections == [2, 1]
        c.close()


async def test_a_page_larger_than_the_buffer_and_a_head_that_never_ends() -> None:
    page = b"vllm:x 1\n" * 40000  # 360 KB: the connection's buffer grows to take it, then serves smaller ones
    async with scripted(lambda n: fixed(page if n == 1 else b"small")(n)) as (port, _):
        c = conn(port)
        assert await c.get() == page
        assert await c.get() == b"small"
        c.close()
    async with scripted(lambda n: b"HTTP/1.1 200 OK\r\n" + b"X-Pad: y\r\n" * 10000) as (port, _):
        with pytest.raises(FetchError, match="head over"):
            await conn(port).get()


async def test_bytes_sent_between_answers_drop_the_connection_not_the_memory() -> None:
    # An answer followed by far more than anyone asked for: the connection is closed, the next GET
    # gets a new one and its own answer.
    async with scripted(lambda n: fixed(b"ok")(n) + b"x" * (1 << 20)) as (port, connections):
        c = conn(port)
        assert await c.get() == b"ok"
        await wait_until(lambda: not c.connected)
        assert await c.get() == b"ok"
        assert connections == [1, 1]
        c.close()


async def test_a_body_without_framing_is_read_until_the_server_closes() -> None:
    body = bytes(range(256)) * 16384  # 4 MiB: far more than one socket read returns
    async with scripted(lambda n: b"HTTP/1.0 200 OK\r\n\r\n" + body, close_after=1) as (port, _):
        c = conn(port, max_body=len(body))
        assert await c.get() == body
    async with scripted(lambda n: b"HTTP/1.0 200 OK\r\n\r\n" + body, close_after=1) as (port, _):
        with pytest.raises(FetchError, match="exceeds"):
            await conn(port, max_body=len(body) - 1).get()


async def test_https_keeps_one_tls_connection_alive_and_skips_verification_by_default(tmp_path: Path) -> None:
    server_tls, _ = model_server_tls(tmp_path, "127.0.0.2")
    async with scripted(fixed(b"vllm:num_requests_waiting 1\n"), tls=server_tls) as (port, connections):
        c = MetricsConnection("127.0.0.2", port, "/metrics", tls=tls_context(verify=False), max_body=1 << 20)
        assert c.where == f"https://127.0.0.2:{port}/metrics"
        for _ in range(3):
            assert await c.get() == b"vllm:num_requests_waiting 1\n"
        c.close()
    assert connections == [3]


async def test_https_verification_uses_the_system_cas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server_tls, cert_file = model_server_tls(tmp_path, "127.0.0.2")
    async with scripted(fixed(b"ok"), tls=server_tls) as (port, connections):
        strict = MetricsConnection("127.0.0.2", port, "/metrics", tls=tls_context(verify=True), max_body=100)
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED") as e:
            await strict.get()
        assert e.value.reason == "connect" and connections == []
        monkeypatch.setenv("SSL_CERT_FILE", str(cert_file))  # now the system trusts it
        trusted = MetricsConnection("127.0.0.2", port, "/metrics", tls=tls_context(verify=True), max_body=100)
        assert await trusted.get() == b"ok"
        trusted.close()
