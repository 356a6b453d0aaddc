"""``ApiServer``: the aiohttp app, its lifecycle, test hooks, and the ``/_sim/`` admin endpoints.

Serves plain HTTP on loopback with no authentication. The store outlives the HTTP listener, so
``restart()`` stops serving (open watches end, connections close), then serves again on the
same port with every object and the resourceVersion counter intact. Test hooks exist both as
methods and over HTTP for out-of-process use:

    POST   /_sim/errors      {"status": 503, "verb": "list", "pathPrefix": "/api/v1/pods", "times": 2}
    POST   /_sim/latency     {"seconds": 0.2, "verb": null, "pathPrefix": ""}
    DELETE /_sim/faults      clear error and latency rules
    POST   /_sim/watches/drop   end every open watch cleanly → {"dropped": n}
    POST   /_sim/compact     forget the watch history (old resourceVersions get 410)
    PUT    /_sim/history     {"limit": n} bound the watch history
    POST   /_sim/restart     {"downSeconds": 0.0} stop serving, then serve again on the same port
    GET    /_sim/state       resourceVersion, open watches, history bounds
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import yaml
from aiohttp import web

from epp.clock import Clock
from epp_sim.apiserver.errors import ApiError
from epp_sim.apiserver.faults import ErrorRule, Faults, LatencyRule, verb_of
from epp_sim.apiserver.rest import RestApi, json_response
from epp_sim.apiserver.store import Store

__all__ = ["ApiServer"]

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ApiServer:
    """A fake Kubernetes API server on ``host:port`` (0 picks a free port at the first start)."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        store: Store | None = None,
        clock: Clock | None = None,
        history_limit: int = 10_000,
        pod_grace_seconds: float = 0.0,
        bookmark_interval: float = 1.0,
        seed: int = 0,
    ) -> None:
        self.host = host
        self.port = port
        self.store = store or Store(
            clock=clock, history_limit=history_limit, pod_grace_seconds=pod_grace_seconds, seed=seed
        )
        self.faults = Faults()
        self.rest = RestApi(self.store, bookmark_interval=bookmark_interval)
        self.recent_requests: deque[str] = deque(maxlen=1000)
        """``"METHOD /path?query"`` of the latest API requests (admin calls excluded), for tests."""
        self._runner: web.AppRunner | None = None
        self._restart_task: asyncio.Task[None] | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def serving(self) -> bool:
        return self._runner is not None

    # ------------------------------------------------------------------------------ lifecycle

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._middleware], client_max_size=64 * 1024 * 1024)
        app.add_routes(
            [
                web.get("/_sim/state", self._admin_state),
                web.post("/_sim/errors", self._admin_errors),
                web.post("/_sim/latency", self._admin_latency),
                web.delete("/_sim/faults", self._admin_clear),
                web.post("/_sim/watches/drop", self._admin_drop),
                web.post("/_sim/compact", self._admin_compact),
                web.put("/_sim/history", self._admin_history),
                web.post("/_sim/restart", self._admin_restart),
            ]
        )
        app.add_routes(self.rest.routes())
        return app

    async def start(self) -> None:
        """Serve (again) on ``host:port``; the first start with port 0 picks a free port."""
        if self._runner is not None:
            return
        runner = web.AppRunner(self._app(), access_log=None, shutdown_timeout=1.0)
        await runner.setup()
        site = web.TCPSite(runner, self.host, self.port, reuse_address=True)
        try:
            await site.start()
        except BaseException:
            await runner.cleanup()
            raise
        if self.port == 0:
            self.port = int(runner.addresses[0][1])
        self._runner = runner
        log.info("fake API server listening", extra={"url": self.url})

    async def stop(self) -> None:
        """Stop serving: end watches, close connections; the store is kept."""
        runner, self._runner = self._runner, None
        if runner is None:
            return
        self.store.events.close_watches()
        await runner.cleanup()

    async def restart(self, down_seconds: float = 0.0) -> None:
        """Stop serving, stay down ``down_seconds``, serve again on the same port (objects kept)."""
        await self.stop()
        if down_seconds > 0:
            await asyncio.sleep(down_seconds)
        await self.start()

    async def aclose(self) -> None:
        """Stop serving and release the store's timers."""
        task, self._restart_task = self._restart_task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        await self.stop()
        await self.store.aclose()

    async def __aenter__(self) -> ApiServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ------------------------------------------------------------------------------ test hooks

    def inject_error(
        self,
        status: int,
        *,
        verb: str | None = None,
        path_prefix: str = "",
        times: int | None = 1,
        message: str = "injected error",
    ) -> None:
        """Answer the next ``times`` matching requests with a ``Status`` of ``status``."""
        self.faults.add_error(ErrorRule(status, verb, path_prefix, times, message))

    def inject_latency(self, seconds: float, *, verb: str | None = None, path_prefix: str = "") -> None:
        """Delay every matching request by ``seconds`` (until ``clear_faults``)."""
        self.faults.add_latency(LatencyRule(seconds, verb, path_prefix))

    def clear_faults(self) -> None:
        self.faults.clear()

    def drop_watches(self) -> int:
        """End every open watch stream cleanly; returns how many."""
        return self.store.events.close_watches()

    def kubeconfig(self, *, namespace: str = "default") -> dict[str, Any]:
        """A kubeconfig for this server: plain HTTP, no auth, a current-context."""
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "epp-sim", "cluster": {"server": self.url}}],
            "users": [{"name": "epp-sim", "user": {}}],
            "contexts": [
                {"name": "epp-sim", "context": {"cluster": "epp-sim", "user": "epp-sim", "namespace": namespace}}
            ],
            "current-context": "epp-sim",
            "preferences": {},
        }

    async def write_kubeconfig(self, path: Path, *, namespace: str = "default") -> Path:
        """Write ``kubeconfig()`` to ``path`` (off the event loop)."""
        text = yaml.safe_dump(self.kubeconfig(namespace=namespace), sort_keys=False)
        await asyncio.to_thread(path.write_text, text)
        return path

    # ------------------------------------------------------------------------------ middleware

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            if not request.path.startswith("/_sim/"):
                self.recent_requests.append(f"{request.method} {request.path_qs}")
                verb = verb_of(request.method, dict(request.query), named=_named(request.path))
                delay = self.faults.delay_for(verb, request.path)
                if delay > 0:
                    await asyncio.sleep(delay)
                injected = self.faults.error_for(verb, request.path)
                if injected is not None:
                    raise injected
            return await handler(request)
        except ApiError as e:
            return json_response(e.status(), e.code)
        except web.HTTPException as e:
            err = ApiError(
                e.status,
                e.reason.replace(" ", ""),
                "the server could not find the requested resource" if e.status == 404 else e.reason,
            )
            return json_response(err.status(), e.status)
        except (ConnectionResetError, asyncio.CancelledError):
            raise
        except Exception as e:
            log.exception("fake API server request failed", extra={"path": request.path})
            return json_response(ApiError(500, "InternalError", f"Internal error occurred: {e}").status(), 500)

    # ------------------------------------------------------------------------------ admin

    async def _admin_body(self, request: web.Request) -> dict[str, Any]:
        try:
            body = await request.json() if request.can_read_body else {}
        except ValueError as e:
            raise ApiError(400, "BadRequest", f"admin body is not JSON: {e}") from e
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "admin body must be a JSON object")
        return body

    async def _admin_state(self, request: web.Request) -> web.Response:
        ev = self.store.events
        return json_response(
            {
                "resourceVersion": ev.rv,
                "openWatches": ev.open_watches(),
                "historyLimit": ev.history_limit,
                "compactedResourceVersion": ev.compacted_rv,
            }
        )

    async def _admin_errors(self, request: web.Request) -> web.Response:
        b = await self._admin_body(request)
        try:
            self.inject_error(
                int(b["status"]),
                verb=b.get("verb"),
                path_prefix=str(b.get("pathPrefix", "")),
                times=None if b.get("times", 1) is None else int(b.get("times", 1)),
                message=str(b.get("message", "injected error")),
            )
        except (KeyError, TypeError, ValueError) as e:
            raise ApiError(400, "BadRequest", f"bad error rule {b!r}: {e}") from e
        return json_response({"ok": True})

    async def _admin_latency(self, request: web.Request) -> web.Response:
        b = await self._admin_body(request)
        try:
            self.inject_latency(float(b["seconds"]), verb=b.get("verb"), path_prefix=str(b.get("pathPrefix", "")))
        except (KeyError, TypeError, ValueError) as e:
            raise ApiError(400, "BadRequest", f"bad latency rule {b!r}: {e}") from e
        return json_response({"ok": True})

    async def _admin_clear(self, request: web.Request) -> web.Response:
        self.clear_faults()
        return json_response({"ok": True})

    async def _admin_drop(self, request: web.Request) -> web.Response:
        return json_response({"dropped": self.drop_watches()})

    async def _admin_compact(self, request: web.Request) -> web.Response:
        self.store.compact()
        return json_response({"compactedResourceVersion": self.store.events.compacted_rv})

    async def _admin_history(self, request: web.Request) -> web.Response:
        b = await self._admin_body(request)
        try:
            self.store.events.history_limit = int(b["limit"])
        except (KeyError, TypeError, ValueError) as e:
            raise ApiError(400, "BadRequest", f"bad history limit {b!r}: {e}") from e
        return json_response({"historyLimit": self.store.events.history_limit})

    async def _admin_restart(self, request: web.Request) -> web.Response:
        b = await self._admin_body(request)
        if self._restart_task is not None and not self._restart_task.done():
            raise ApiError(409, "Conflict", "a restart is already in progress")
        down = float(b.get("downSeconds", 0.0))
        self._restart_task = asyncio.get_running_loop().create_task(
            self._restart_later(down), name="epp-sim-apiserver-restart"
        )
        return json_response({"restarting": True, "downSeconds": down})

    async def _restart_later(self, down: float) -> None:
        try:  # the listener closes gracefully: the admin response in flight is still sent
            await self.restart(down)
        except Exception:
            log.exception("fake API server restart failed", extra={"url": self.url})


def _named(path: str) -> bool:
    """Whether a resource URL addresses one object (odd segment count after the group-version)."""
    segs = [s for s in path.split("/") if s]
    rest = segs[2:] if segs[:1] == ["api"] else segs[3:]
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) != 2:
        rest = rest[2:]
    return len(rest) >= 2
