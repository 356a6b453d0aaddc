"""The process's single kr8s ``Api`` and the boundary where kr8s/httpx errors become ours.

Everything in ``epp.kube`` talks to the API server through :func:`request_json` and
:func:`stream_lines`, so foreign exceptions (``kr8s.ServerError``, ``kr8s.APITimeoutError``,
``httpx.TransportError``, a malformed body) are translated in one place, most specific first,
and chained with ``raise … from``. The tree::

    EppError
     └── KubeError                  anything that went wrong talking to the API server
          ├── KubeConfigError       no usable kubeconfig / in-cluster credentials
          ├── KubeUnavailableError  cannot reach it: refused, reset, timed out, 5xx (retry later)
          └── KubeApiError          it answered 4xx, or with a body we cannot read (.status)
               └── KubeGoneError    410 Gone: the resourceVersion is too old; relist

:func:`make_api` loads credentials only (``--kubeconfig``, else ``KUBECONFIG``, else
``~/.kube/config``, else the in-cluster service account); it does not call the API server, so the
picker starts (and keeps serving its last state) while the API server is away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from typing import Any

import httpx
import kr8s
import yaml
from kr8s.asyncio import Api

from epp.errors import EppError, ErrorCode

__all__ = [
    "Api",
    "call_json",
    "KubeApiError",
    "KubeConfigError",
    "KubeError",
    "KubeGoneError",
    "JsonObject",
    "KubeUnavailableError",
    "close_api",
    "make_api",
    "request_json",
    "served_kinds",
    "stream_lines",
    "translate_errors",
]

JsonObject = dict[str, Any]


class KubeError(EppError):
    """Talking to the Kubernetes API server failed."""

    def __init__(self, msg: str, *, code: ErrorCode = ErrorCode.SERVICE_UNAVAILABLE) -> None:
        super().__init__(code, msg)


class KubeConfigError(KubeError):
    """No usable credentials: the kubeconfig is missing or broken and we are not in a cluster."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg, code=ErrorCode.INTERNAL)


class KubeUnavailableError(KubeError):
    """The API server cannot be reached or answered 5xx; try again later."""


class KubeApiError(KubeError):
    """The API server answered with a client error (``status`` is the HTTP or Status code)."""

    def __init__(self, msg: str, *, status: int) -> None:
        super().__init__(msg, code=ErrorCode.INTERNAL)
        self.status = status


class KubeGoneError(KubeApiError):
    """410 Gone: the watch or continue token refers to history the server no longer has."""

    def __init__(self, msg: str) -> None:
        super().__init__(msg, status=410)


async def make_api(kubeconfig: str | None = None) -> Api:
    """Build the process's one kr8s ``Api`` from credentials, without contacting the server.

    ``kr8s.asyncio.api()`` would also call ``/version``, failing start-up while the API server is
    unreachable; the informers retry with backoff instead.
    """
    if kubeconfig:
        # kr8s silently falls back to the service account when the file is missing; a flag that
        # names a file that does not exist is a configuration error.
        missing = [p for p in kubeconfig.split(os.pathsep) if not await asyncio.to_thread(os.path.isfile, p)]
        if missing:
            raise KubeConfigError(f"--kubeconfig: no such file {', '.join(missing)}")
    try:
        api = Api(bypass_factory=True, kubeconfig=kubeconfig or None)
        await api.auth.reauthenticate()
        # kr8s creates its HTTP session lazily, and concurrent first calls (our informers start
        # together) each create one, orphaning all but the last with its open connections.
        await api._create_session()
    except (ValueError, KeyError, TypeError, OSError, yaml.YAMLError) as e:
        source = kubeconfig or "KUBECONFIG / ~/.kube/config / in-cluster service account"
        raise KubeConfigError(f"cannot load Kubernetes credentials from {source}: {e}") from e
    return api


async def close_api(api: Api) -> None:
    """Close the HTTP session kr8s opened (kr8s has no public close)."""
    session: httpx.AsyncClient | None = getattr(api, "_session", None)
    if session is not None and not session.is_closed:
        await session.aclose()


def _status_of(e: kr8s.ServerError) -> tuple[int, str]:
    """HTTP status and the server's message from a kr8s ``ServerError``."""
    code = e.response.status_code if e.response is not None else 0
    status = e.status
    if isinstance(status, Mapping):
        code = int(status.get("code") or code)
        return code, str(status.get("message") or e)
    return code, str(e)


@contextlib.contextmanager
def translate_errors(what: str) -> Iterator[None]:
    """Map kr8s/httpx/JSON errors raised while doing ``what`` to :class:`KubeError`."""
    try:
        yield
    except kr8s.NotFoundError as e:
        raise KubeApiError(f"{what}: not found", status=404) from e
    except kr8s.ServerError as e:
        code, message = _status_of(e)
        if code == 410:
            raise KubeGoneError(f"{what}: {message}") from e
        if code >= 500 or code in (0, 429):
            raise KubeUnavailableError(f"{what}: HTTP {code}: {message}") from e
        raise KubeApiError(f"{what}: HTTP {code}: {message}", status=code) from e
    except kr8s.APITimeoutError as e:
        raise KubeUnavailableError(f"{what}: timed out") from e
    except httpx.HTTPError as e:
        raise KubeUnavailableError(f"{what}: {type(e).__name__}: {e}") from e
    except OSError as e:  # refused, reset, TLS failures, timeouts
        raise KubeUnavailableError(f"{what}: {type(e).__name__}: {e}") from e
    except ValueError as e:  # json.JSONDecodeError, and kr8s's "Unable to find valid credentials"
        raise KubeApiError(f"{what}: unreadable response or config: {e}", status=0) from e


def _location(group_version: str, namespace: str | None, path: str) -> tuple[str, str]:
    """``(base, url)`` for kr8s's ``call_api``: ``/api`` + ``v1/...`` or ``/apis`` + ``g/v/...``."""
    base = "/api" if group_version == "v1" else "/apis"
    parts = [group_version]
    if namespace:
        parts += ["namespaces", namespace]
    if path:
        parts.append(path)
    return base, "/".join(parts)


async def call_json(
    api: Api,
    method: str,
    *,
    group_version: str,
    path: str = "",
    namespace: str | None = None,
    params: Mapping[str, str] | None = None,
    body: JsonObject | None = None,
    content_type: str = "application/json",
) -> JsonObject:
    """One JSON request under ``/api`` or ``/apis``; errors come out as :class:`KubeError`."""
    base, url = _location(group_version, namespace, path)
    what = f"{method} {base}/{url}"
    kwargs: dict[str, Any] = {"params": dict(params or {})}
    if body is not None:
        kwargs["content"] = json.dumps(body)
        kwargs["headers"] = {"Content-Type": content_type}
    with translate_errors(what):
        async with api.call_api(method, version="", base=base, url=url, **kwargs) as response:
            result = response.json()
    if not isinstance(result, dict):
        raise KubeApiError(f"{what}: expected a JSON object, got {type(result).__name__}", status=0)
    return result


async def request_json(
    api: Api,
    *,
    group_version: str,
    path: str = "",
    namespace: str | None = None,
    params: Mapping[str, str] | None = None,
) -> JsonObject:
    """GET one JSON document (a list page, discovery) under ``/api`` or ``/apis``."""
    return await call_json(api, "GET", group_version=group_version, path=path, namespace=namespace, params=params)


@contextlib.asynccontextmanager
async def stream_lines(
    api: Api,
    *,
    group_version: str,
    path: str,
    namespace: str | None = None,
    params: Mapping[str, str] | None = None,
) -> AsyncIterator[AsyncIterator[JsonObject]]:
    """Open a streaming GET (a watch) and yield an iterator over its JSON lines.

    Errors raised while opening or reading the stream are translated; errors raised by the
    caller's own code inside the ``async with`` body pass through untouched.
    """
    base, url = _location(group_version, namespace, path)
    what = f"WATCH {base}/{url}"

    async def lines(response: httpx.Response) -> AsyncGenerator[JsonObject, None]:
        with translate_errors(what):
            async for line in response.aiter_lines():
                if not line.strip():
                    continue
                try:
                    event = json.loads(line)
                except json.JSONDecodeError as e:
                    raise KubeApiError(f"{what}: unreadable watch event {line[:200]!r}", status=0) from e
                if not isinstance(event, dict):
                    raise KubeApiError(f"{what}: watch event is not an object: {line[:200]!r}", status=0)
                yield event

    async with contextlib.AsyncExitStack() as stack:
        with translate_errors(what):
            response = await stack.enter_async_context(
                api.call_api("GET", version="", base=base, url=url, params=dict(params or {}), stream=True)
            )
        events = lines(response)
        stack.push_async_callback(events.aclose)
        yield events


async def served_kinds(api: Api, group_version: str) -> frozenset[str]:
    """Kinds the server offers in ``group_version`` (discovery); empty if the group is not served."""
    try:
        body = await request_json(api, group_version=group_version)
    except KubeApiError as e:
        if e.status == 404:
            return frozenset()
        raise
    resources = body.get("resources") or []
    return frozenset(str(r.get("kind")) for r in resources if isinstance(r, dict) and "/" not in str(r.get("name")))
