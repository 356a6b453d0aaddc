"""An aiohttp session for occasional model-server reads (the autoscaler's per-cycle scrapes).

The picker's own 50 ms scrape loop does not use it: it keeps one connection per endpoint
(:mod:`epp.datalayer.metrics_fetch`). This session asks for uncompressed Prometheus text and
ignores proxy environment variables (pod IPs must never go via a proxy).
"""

from __future__ import annotations

import aiohttp

__all__ = ["create_session"]

# Prometheus text format 0.0.4: the format every engine serves and the parser reads.
_ACCEPT = "text/plain;version=0.0.4;q=1,*/*;q=0.1"


def create_session(
    *,
    limit: int = 512,
    limit_per_host: int = 4,
    keepalive_timeout: float = 10.0,
    total_timeout: float = 10.0,
    connect_timeout: float = 2.0,
) -> aiohttp.ClientSession:
    """A session for scraping; must be called on the running event loop; the caller closes it.

    ``total_timeout`` (upstream's 10 s client timeout) bounds any request; scrapers put their own
    shorter per-request deadline on top. ``limit_per_host`` keeps a slow server from holding
    more than a few sockets; ``keepalive_timeout`` is upstream's 10 s idle-connection time.
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
        headers={"Accept": _ACCEPT, "Accept-Encoding": "identity", "User-Agent": "epp-scraper"},
        cookie_jar=aiohttp.DummyCookieJar(),
        trust_env=False,
        raise_for_status=False,
    )
