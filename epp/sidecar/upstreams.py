"""The sidecar's HTTP clients: one connection pool per stage, over TLS when ``--enable-tls`` names it.

``prefiller``, ``decoder`` and ``encoder`` each get a session whose scheme and certificate check
come from ``--enable-tls`` and ``--tls-insecure-skip-verify`` (verified against the system's CAs,
TLS 1.2 or later, as upstream's Go transport). Connections are kept alive and never capped, so
concurrency is the engine's business. No overall timeout applies to a decode (a generation may
run for minutes); connecting gives up after 30 s, Go's dial timeout.

:func:`open_stream` starts a request to the local engine and :func:`relay` streams its answer to
the client as it comes (chunk by chunk, so SSE stays live), optionally rewriting the usage it
reports. When the engine is not listening the client gets upstream's 503 ("The decode node is not
ready"), for any other transport failure a 502, both in vLLM's error shape.
"""

from __future__ import annotations

import errno
import logging
import ssl
from collections.abc import Iterable, Mapping

import aiohttp
import orjson
from aiohttp import web
from multidict import CIMultiDict

from epp.sidecar.options import STAGES, SidecarOptions
from epp.sidecar.usage_rewrite import CachedTokensRewriter

__all__ = ["Upstreams", "error_response", "forwarded_headers", "open_stream", "relay"]

log = logging.getLogger(__name__)

_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
        "content-length",
    }
)
_CONNECT_TIMEOUT = aiohttp.ClientTimeout(total=None, sock_connect=30)
_NOT_READY = (
    "The decode node is not ready. Please check that the vLLM service is running and the port configuration is correct."
)


def error_response(status: int, message: str, error_type: str) -> web.Response:
    """vLLM's error body (``{object: "error", message, type, param, code}``), as upstream's sidecar writes it."""
    body = {"object": "error", "message": message, "type": error_type, "param": "", "code": status}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def forwarded_headers(headers: Mapping[str, str], drop: Iterable[str] = ()) -> CIMultiDict[str]:
    """The client's headers for another hop: without hop-by-hop headers, ``Host``, ``Content-Length`` and ``drop``."""
    dropped = _HOP_BY_HOP | {h.lower() for h in drop}
    return CIMultiDict((k, v) for k, v in headers.items() if k.lower() not in dropped)


def _client_context(verify: bool) -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    if not verify:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


class Upstreams:
    """A client session per stage; :meth:`url` gives a stage's base URL for a ``host:port``."""

    def __init__(self, options: SidecarOptions) -> None:
        self._options = options
        self._sessions: dict[str, aiohttp.ClientSession] = {}

    def start(self) -> None:
        """Make the sessions (on the running loop)."""
        for stage in STAGES:
            tls: ssl.SSLContext | bool = False
            if stage in self._options.tls_stages:
                tls = _client_context(verify=stage not in self._options.insecure_stages)
            connector = aiohttp.TCPConnector(limit=0, ssl=tls)
            self._sessions[stage] = aiohttp.ClientSession(
                connector=connector, timeout=_CONNECT_TIMEOUT, auto_decompress=False
            )

    async def close(self) -> None:
        sessions, self._sessions = self._sessions, {}
        for session in sessions.values():
            await session.close()

    def session(self, stage: str) -> aiohttp.ClientSession:
        return self._sessions[stage]

    def url(self, stage: str, hostport: str, path: str) -> str:
        hostport = hostport.removeprefix("http://").removeprefix("https://")
        return f"{self._options.scheme(stage)}://{hostport}{path}"


async def open_stream(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: Mapping[str, str],
    data: object,
) -> aiohttp.ClientResponse | web.Response:
    """The local engine's answer, still streaming; or the error response the client gets when it cannot be reached."""
    try:
        return await session.request(method, url, headers=headers, data=data)
    except aiohttp.ClientConnectorError as e:
        if e.os_error.errno == errno.ECONNREFUSED:
            log.error("failed to connect to the local model server", extra={"url": url, "error": str(e)})
            return error_response(503, _NOT_READY, "ServiceUnavailable")
        log.error("proxy error", extra={"url": url, "error": str(e)})
        return error_response(502, str(e), "BadGateway")
    except (aiohttp.ClientError, OSError) as e:
        log.error("proxy error", extra={"url": url, "error": str(e)})
        return error_response(502, str(e) or type(e).__name__, "BadGateway")


async def relay(
    request: web.Request,
    upstream: aiohttp.ClientResponse,
    *,
    cached_tokens: int | None = None,
    head: bytes = b"",
) -> web.StreamResponse:
    """Send ``upstream``'s answer to the client as it arrives (``head``: what was already read of it).

    ``cached_tokens`` rewrites the usage's cached prompt tokens of a successful answer.
    """
    async with upstream:
        ok = 200 <= upstream.status < 300
        sse = "text/event-stream" in upstream.headers.get("Content-Type", "")
        rewriter = CachedTokensRewriter(cached_tokens, sse=sse) if cached_tokens is not None and ok else None
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        response.headers.update(forwarded_headers(upstream.headers))
        if rewriter is None and upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        if head:
            await response.write(rewriter.feed(head) if rewriter is not None else head)
        async for chunk in upstream.content.iter_any():
            out = rewriter.feed(chunk) if rewriter is not None else chunk
            if out:
                await response.write(out)
        if rewriter is not None:
            tail = rewriter.finish()
            if tail:
                await response.write(tail)
        await response.write_eof()
    return response
