"""The overhead benchmark's fast backend: N "model servers" in one process, cheap enough to never be the bottleneck.

Listens on ``port`` at ``127.0.0.<start>`` … ``127.0.0.<start+n-1>`` (the pods of the benchmark
pool; past ``127.0.0.254`` on through ``127.0.1.1`` …, :func:`pod_host`) with a raw asyncio
HTTP/1.1 protocol, no framework: keep-alive, ``Content-Length`` and chunked request bodies (Envoy
streams bodies chunked once an ext_proc filter may change them).

- ``POST`` anything: a fixed OpenAI completion (with ``usage``), as fast as a socket write.
- ``GET /metrics``: a realistic vLLM page (~45 KB, ~470 lines), rendered by the model-server
  simulator's own renderer. Eight variants with different queue and KV values are rendered up
  front and served in turn, so the picker's scraper parses values that move, at no render cost.
- ``GET /health``: 200.

Run as ``python -m epp_sim.bench.backend --count 8 --port 8000``; it serves until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence
from typing import cast

__all__ = ["MAX_PODS", "BackendProtocol", "metrics_pages", "pod_host", "serve_backend"]

MAX_PODS = 2000
"""Addresses :func:`pod_host` hands out from 127.0.0.2 (the whole of 127.0.0.0/8 is loopback on Linux)."""


def pod_host(index: int, first: int = 2) -> str:
    """The loopback address of pod ``index``: ``127.0.0.<first+index>`` up to .254, then ``127.0.1.1`` … ``.254``, …

    Last octets 0 and 255 are skipped, so every address is an ordinary host address.
    """
    n = first + index
    if not 0 < n < MAX_PODS + first:
        raise ValueError(f"pod index {index} outside 0..{MAX_PODS - 1}")
    if n <= 254:
        return f"127.0.0.{n}"
    third, last = divmod(n - 255, 254)
    return f"127.0.{1 + third}.{1 + last}"


_COMPLETION = (
    b'{"id":"cmpl-bench","object":"text_completion","created":1700000000,"model":"bench",'
    b'"choices":[{"index":0,"text":" ok","logprobs":null,"finish_reason":"length","stop_reason":null}],'
    b'"usage":{"prompt_tokens":256,"total_tokens":257,"completion_tokens":1,"prompt_tokens_details":null}}'
)
_MAX_HEAD = 64 * 1024


def _response(status: bytes, body: bytes, content_type: bytes) -> bytes:
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: " + content_type + b"\r\ncontent-length: "
        b"" + str(len(body)).encode() + b"\r\n\r\n" + body
    )


def metrics_pages(variants: int = 8) -> list[bytes]:
    """Whole HTTP responses carrying vLLM ``/metrics`` pages with ``variants`` different load values."""
    from epp_sim.modelserver import Engine, Pins, SimConfig
    from epp_sim.modelserver.exposition import CONTENT_TYPE

    engine = Engine(SimConfig(lora_modules={"sql-lora": "/adapters/sql", "chat-lora": "/adapters/chat"}, max_loras=2))
    pages = []
    for i in range(variants):
        engine.set_pins(
            Pins(waiting=i % 4, running=4 + i, kv_cache_usage=0.05 * i, running_loras=("sql-lora",), max_lora=2)
        )
        pages.append(_response(b"200 OK", engine.render_metrics(), CONTENT_TYPE.encode()))
    return pages


class BackendProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection: parse requests as they complete, answer each at once."""

    def __init__(self, pages: Sequence[bytes], completion: bytes) -> None:
        self._pages = pages
        self._completion = completion
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._page = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement the interface without subclassing asyncio.Transport.
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._buf += data
        while self._transport is not None and self._one_request():
            pass

    def _one_request(self) -> bool:
        """Answer the first complete request in the buffer; False when more bytes are needed."""
        buf = self._buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > _MAX_HEAD:
                self._fail()
            return False
        head = bytes(buf[:end]).lower()
        body_start = end + 4
        consumed = _body_end(buf, head, body_start)
        if consumed is None:
            return False
        if consumed < 0:
            self._fail()
            return False
        del buf[:consumed]
        assert self._transport is not None
        if head.startswith(b"get /metrics"):
            self._page = (self._page + 1) % len(self._pages)
            self._transport.write(self._pages[self._page])
        elif head.startswith(b"get"):
            self._transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n")
        else:
            self._transport.write(self._completion)
        return True

    def _fail(self) -> None:
        assert self._transport is not None
        self._transport.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
        self._transport.close()
        self._transport = None


def _header(head: bytes, name: bytes) -> bytes | None:
    start = head.find(b"\r\n" + name + b":")
    if start < 0:
        return None
    start += len(name) + 3
    stop = head.find(b"\r\n", start)
    return head[start : stop if stop >= 0 else len(head)].strip()


def _body_end(buf: bytearray, head: bytes, start: int) -> int | None:
    """Offset just past this request's body; None if incomplete; -1 if malformed."""
    if _header(head, b"transfer-encoding") == b"chunked":
        pos = start
        while True:
            line_end = buf.find(b"\r\n", pos)
            if line_end < 0:
                return None
            try:
                size = int(bytes(buf[pos:line_end]).split(b";", 1)[0], 16)
            except ValueError:
                return -1
            pos = line_end + 2 + size + 2
            if len(buf) < pos:
                return None
            if size == 0:
                return pos
    length = _header(head, b"content-length")
    if length is None:
        return start
    try:
        total = start + int(length)
    except ValueError:
        return -1
    return total if len(buf) >= total else None


async def serve_backend(hosts: Sequence[str], port: int, stop: asyncio.Event) -> None:
    """Serve on every host at ``port`` until ``stop`` is set."""
    loop = asyncio.get_running_loop()
    pages = metrics_pages()
    completion = _response(b"200 OK", _COMPLETION, b"application/json")
    servers = []
    try:
        for host in hosts:
            servers.append(
                await loop.create_server(
                    lambda: BackendProtocol(pages, completion), host, port, reuse_address=True, backlog=4096
                )
            )
        await stop.wait()
    finally:
        for server in servers:
            server.close()
        for server in servers:
            await server.wait_closed()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the backend child process."""
    parser = argparse.ArgumentParser(prog="python -m epp_sim.bench.backend", description=__doc__)
    parser.add_argument("--count", type=int, default=8, help="number of addresses (pods)")
    parser.add_argument("--first", type=int, default=2, help="last octet of the first 127.0.0.x address")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    if not 1 <= args.count <= MAX_PODS or not 1 <= args.first <= 254:
        parser.error(f"--count must be within 1..{MAX_PODS} and --first within 1..254")
    hosts = [pod_host(i, args.first) for i in range(args.count)]

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await serve_backend(hosts, args.port, stop)

    with contextlib.suppress(ImportError):
        import uvloop

        uvloop.install()
    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
