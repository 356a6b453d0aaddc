"""The shared aiohttp session: the autoscaler's model-server reads, and the picker's one client for plugins.

The picker's own 50 ms scrape loop does not use it: it keeps one connection per endpoint
(:mod:`epp.datalayer.metrics_fetch`). Everything else that speaks HTTP from one process shares
one session, made once by its composition root, passed down and closed once: the autoscaler's
per-cycle scrapes and PromQL queries (``epp autoscale``), and in ``epp serve`` the plugins'
calls (``token-producer``'s render requests), which get it as the framework's
:class:`~epp.framework.http.HttpClient` (:class:`SessionClient`, ``PluginContext.http``). The
session ignores proxy environment variables (pod IPs must never go via a proxy) and keeps no
cookies; the scraping one asks for uncompressed Prometheus text.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from epp.framework.http import HttpError, HttpResponse

__all__ = ["SessionClient", "create_session"]

# Prometheus text format 0.0.4: the format every engine serves and the parser reads.
_SCRAPE_HEADERS = {
    "Accept": "text/plain;version=0.0.4;q=1,*/*;q=0.1",
    "Accept-Encoding": "identity",
    "User-Agent": "epp-scraper",
}
_PLUGIN_HEADERS = {"Accept": "application/json", "User-Agent": "epp"}


def create_session(
    *,
    limit: int = 512,
    limit_per_host: int = 4,
    keepalive_timeout: float = 10.0,
    total_timeout: float = 10.0,
    connect_timeout: float = 2.0,
    headers: Mapping[str, str] = _SCRAPE_HEADERS,
) -> aiohttp.ClientSession:
    """A session; must be called on the running event loop; the caller closes it.

    ``total_timeout`` (upstream's 10 s client timeout) bounds any request; callers put their own
    shorter per-request deadline on top. ``limit_per_host`` (0: none) keeps a slow server from
    holding more than a few sockets; ``keepalive_timeout`` is upstream's 10 s idle-connection time.
    """
    connector = aiohttp.TCPConnector(
        limit=limit,
        limit_per_host=limit_per_host,
        keepalive_timeout=keepalive_timeout,
        use_dns_cache=True,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=total_timeout, sock_connect=connect_timeout),
        headers=dict(headers),
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        raise_for_status=False,
    )


class SessionClient:
    """The framework's :class:`~epp.framework.http.HttpClient` over one session, made on first use.

    Made once by the runtime (anywhere: the session itself is created on the event loop, by the
    first request) and closed once by it with :meth:`aclose`; a call after that is refused (it
    would open a session nobody closes). Connections are not limited per host: the plugins'
    calls go to few servers (a render sidecar on localhost), once per request.
    """

    __slots__ = ("_closed", "_session")

    def __init__(self) -> None:
        self._session: aiohttp.ClientSession | None = None
        self._closed = False

    async def post(self, url: str, body: bytes, *, content_type: str, timeout: float) -> HttpResponse:
        session = self._session
        if session is None:
            if self._closed:
                raise HttpError(f"POST {url}: the picker's HTTP client is closed (the picker is stopping)")
            session = self._session = create_session(limit=100, limit_per_host=0, headers=_PLUGIN_HEADERS)
        try:
            async with session.post(
                url,
                data=body,
                headers={"Content-Type": content_type},
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                return HttpResponse(response.status, await response.read())
        except aiohttp.ClientError as e:
            raise HttpError(f"POST {url}: {type(e).__name__}: {e}") from e

    async def aclose(self) -> None:
        """Close the session, if one was made (safe twice); later calls are refused."""
        self._closed = True
        session, self._session = self._session, None
        if session is not None:
            await session.close()
