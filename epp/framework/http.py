"""The HTTP client plugins are handed: the picker's one shared client, made and closed by the runtime.

A plugin that calls a server (``token-producer``'s render endpoints) gets the client through its
:class:`~epp.framework.plugin.PluginContext` (``context.http``) instead of building its own, so
the process has one pool of connections for everything but the scrapers (which keep one
hand-rolled connection per endpoint, ``epp.datalayer.metrics_fetch``) and closes it once. The
client's library stays behind this seam: plugins see :class:`HttpResponse` and :class:`HttpError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

__all__ = ["HttpClient", "HttpError", "HttpResponse"]


class HttpError(Exception):
    """No answer: the connection was refused, reset or broken, or the URL is unusable."""


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    body: bytes


class HttpClient(Protocol):
    async def post(self, url: str, body: bytes, *, content_type: str, timeout: float) -> HttpResponse:
        """POST ``body``; any status is an answer. Raises :class:`HttpError`, or ``TimeoutError``
        when no whole answer came within ``timeout`` seconds."""
        ...
