"""The Kubernetes REST surface: URL → resource, verbs, list pages, tables, and watch streams.

``/api/v1/...`` and ``/apis/<group>/<version>/...`` are parsed by hand (one catch-all route
each), because ``/api/v1/namespaces/x/status`` is a namespace subresource while
``/api/v1/namespaces/x/pods`` is a collection. Objects are served at the requested version
(``apiVersion`` rewritten; CRD versions convert with strategy None). Every failure is an
``ApiError`` that the server's middleware turns into a ``Status``.
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web

from epp_sim.apiserver import discovery
from epp_sim.apiserver import patch as patches
from epp_sim.apiserver.admission import scale_of
from epp_sim.apiserver.bodies import check_accept, parse_body, parse_object
from epp_sim.apiserver.errors import ApiError, not_found
from epp_sim.apiserver.kinds import Obj, ResourceType
from epp_sim.apiserver.openapi import OpenApi
from epp_sim.apiserver.queries import decode_continue, encode_continue
from epp_sim.apiserver.reviews import Reviews
from epp_sim.apiserver.store import Store
from epp_sim.apiserver.tables import table, wants_table
from epp_sim.apiserver.watch import Watch, bookmark

__all__ = ["RestApi", "Target", "json_response"]

log = logging.getLogger(__name__)
_PATCH_TYPES = (patches.MERGE, patches.JSON_PATCH, patches.STRATEGIC, patches.APPLY)


def _dumps(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def json_response(body: Any, status: int = 200) -> web.Response:
    return web.Response(text=_dumps(body), status=status, content_type="application/json")


@dataclass(frozen=True, slots=True)
class Target:
    """What a resource URL addresses."""

    rt: ResourceType
    version: str
    namespace: str | None
    name: str | None
    sub: str | None


def _truthy(value: str | None) -> bool:
    return value in ("1", "true", "True")


def _int(query: Any, key: str) -> int | None:
    raw = query.get(key)
    if raw in (None, ""):
        return None
    try:
        return int(raw)
    except ValueError as e:
        raise ApiError(400, "BadRequest", f"invalid {key} {raw!r}: must be an integer") from e


class RestApi:
    """Handlers for discovery, OpenAPI and resources over one ``Store``."""

    def __init__(self, store: Store, *, bookmark_interval: float) -> None:
        self.store = store
        self.openapi = OpenApi(store.kinds)
        self.reviews = Reviews(store)
        self.bookmark_interval = bookmark_interval

    def routes(self) -> list[web.RouteDef]:
        """Every route, each also with a trailing slash (kr8s asks for ``/version/``)."""
        fixed = [
            ("/version", self._version),
            ("/healthz", self._ok),
            ("/readyz", self._ok),
            ("/livez", self._ok),
            ("/api", self._api),
            ("/apis", self._apis),
            ("/openapi/v3", self._openapi_root),
            ("/openapi/v2", self._swagger),
        ]
        routes = [web.get(path + slash, handler) for path, handler in fixed for slash in ("", "/")]
        return [
            *routes,
            web.get("/openapi/v3/{path:.+}", self._openapi_doc),
            web.route("*", "/api/{version}", self._core),
            web.route("*", "/api/{version}/{tail:.*}", self._core),
            web.route("*", "/apis/{group}", self._group),
            web.route("*", "/apis/{group}/", self._group),
            web.route("*", "/apis/{group}/{version}", self._grouped),
            web.route("*", "/apis/{group}/{version}/{tail:.*}", self._grouped),
        ]

    # ------------------------------------------------------------------ discovery and OpenAPI

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _version(self, request: web.Request) -> web.Response:
        return json_response(discovery.version_info())

    async def _api(self, request: web.Request) -> web.Response:
        return json_response(discovery.api_versions(request.host))

    async def _apis(self, request: web.Request) -> web.Response:
        return json_response(discovery.api_group_list(self.store.kinds))

    async def _group(self, request: web.Request) -> web.Response:
        body = discovery.group(self.store.kinds, request.match_info["group"])
        if body is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        return json_response(body)

    async def _openapi_root(self, request: web.Request) -> web.Response:
        return json_response(self.openapi.root())

    async def _openapi_doc(self, request: web.Request) -> web.Response:
        found = self.openapi.document(request.match_info["path"].strip("/"))
        if found is None:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        doc, digest = found
        resp = json_response(doc)
        resp.headers["Etag"] = f'"{digest}"'
        if request.query.get("hash") == digest:
            resp.headers["Cache-Control"] = "public, immutable"
        return resp

    async def _swagger(self, request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "*/*")
        if "protobuf" in accept and "json" not in accept and "*/*" not in accept:
            raise ApiError(406, "NotAcceptable", "only application/json is served for /openapi/v2")
        return json_response(self.openapi.swagger())

    # ---------------------------------------------------------------------------- resources

    async def _core(self, request: web.Request) -> web.StreamResponse:
        return await self._resource(request, "", request.match_info["version"], request.match_info.get("tail", ""))

    async def _grouped(self, request: web.Request) -> web.StreamResponse:
        info = request.match_info
        return await self._resource(request, info["group"], info["version"], info.get("tail", ""))

    def target(self, group: str, version: str, tail: str) -> Target | None:
        """Parse the part of the URL after the group-version; None for the resource list itself."""
        segs = [s for s in tail.split("/") if s]
        if not segs:
            return None
        kinds = self.store.kinds
        if len(segs) >= 3 and segs[0] == "namespaces":
            rt = kinds.for_path(group, version, segs[2])
            if rt is not None and rt.namespaced and len(segs) <= 5:
                return Target(
                    rt, version, segs[1], segs[3] if len(segs) > 3 else None, segs[4] if len(segs) > 4 else None
                )
        rt = kinds.for_path(group, version, segs[0])
        if rt is None or len(segs) > 3 or (rt.namespaced and len(segs) > 1):
            gv = f"{group}/{version}" if group else version
            raise ApiError(404, "NotFound", f"the server could not find the requested resource ({gv} {tail})")
        return Target(rt, version, None, segs[1] if len(segs) > 1 else None, segs[2] if len(segs) > 2 else None)

    async def _resource(self, request: web.Request, group: str, version: str, tail: str) -> web.StreamResponse:
        t = self.target(group, version, tail)
        check_accept(request.headers.get("Accept", ""))
        if t is None:
            body = discovery.resource_list(self.store.kinds, group, version)
            if body is None or request.method != "GET":
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return json_response(body)
        if t.rt.review or (t.sub == "token" and t.rt.token_request):
            return await self._review(request, t)
        if t.sub is not None and t.sub not in ("status", "scale"):
            raise not_found(f"{t.rt.plural}/{t.sub}", t.rt.group, t.name or "")
        q = request.query
        if t.name is None:
            if request.method == "GET":
                return await (self._watch(request, t) if _truthy(q.get("watch")) else self._list(request, t))
            if request.method == "POST":
                return await self._create(request, t)
            if request.method == "DELETE":
                return await self._delete_collection(request, t)
        else:
            if request.method == "GET":
                return self._get(request, t)
            if request.method == "PUT":
                return await self._update(request, t)
            if request.method == "PATCH":
                return await self._patch(request, t)
            if request.method == "DELETE" and t.sub is None:
                return await self._delete(request, t)
        raise ApiError(
            405,
            "MethodNotAllowed",
            f"the server does not allow this method on the requested resource ({request.method} {request.path})",
        )

    async def _review(self, request: web.Request, t: Target) -> web.Response:
        """POST a TokenReview, a SubjectAccessReview or a TokenRequest: answered, never stored."""
        if request.method != "POST" or (t.rt.review and t.name is not None):
            raise ApiError(
                405,
                "MethodNotAllowed",
                f"the server does not allow this method on the requested resource ({request.method} {request.path})",
            )
        body = parse_object(await request.read(), request.content_type)
        if t.name is not None:
            return json_response(self.reviews.token_request(t.namespace or "", t.name, body), 201)
        return json_response(self.reviews.answer(t.rt, body), 201)

    def _out(self, t: Target, o: Obj) -> Obj:
        api_version = t.rt.api_version(t.version)
        return o if o.get("apiVersion") == api_version or o.get("kind") == "Scale" else {**o, "apiVersion": api_version}

    def _respond(self, request: web.Request, t: Target, o: Obj, status: int = 200) -> web.Response:
        if wants_table(request.headers.get("Accept", "")) and o.get("kind") == t.rt.kind:
            include = request.query.get("includeObject", "Metadata")
            return json_response(
                table(t.rt, [o], now=self.store.clock.wall(), include=include, version=t.version), status
            )
        return json_response(self._out(t, o), status)

    async def _body(self, request: web.Request, *, yaml_ok: bool = False) -> Any:
        return parse_body(await request.read(), request.content_type, yaml_ok=yaml_ok)

    def _write_opts(self, request: web.Request) -> dict[str, Any]:
        q = request.query
        return {"dry_run": q.get("dryRun") == "All", "strict": q.get("fieldValidation") == "Strict"}

    def _get(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        o = self.store.lookup(t.rt, t.name, t.namespace)
        if o is None:
            raise not_found(t.rt.plural, t.rt.group, t.name)
        if t.sub == "scale":
            return json_response(scale_of(t.rt, o))
        return self._respond(request, t, o)

    async def _list(self, request: web.Request, t: Target) -> web.Response:
        q = request.query
        items = self.store.select(t.rt, t.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        rv = self.store.resource_version
        token = q.get("continue")
        if token:
            rv, after = decode_continue(token)
            items = [o for o in items if (o["metadata"].get("namespace", ""), o["metadata"]["name"]) > after]
        meta: Obj = {"resourceVersion": str(rv)}
        limit = _int(q, "limit")
        if limit is not None and limit > 0 and len(items) > limit:
            last = items[limit - 1]["metadata"]
            meta["continue"] = encode_continue(rv, (last.get("namespace", ""), last["name"]))
            meta["remainingItemCount"] = len(items) - limit
            items = items[:limit]
        if wants_table(request.headers.get("Accept", "")):
            return json_response(
                table(
                    t.rt,
                    items,
                    now=self.store.clock.wall(),
                    include=q.get("includeObject", "Metadata"),
                    version=t.version,
                    list_meta=meta,
                )
            )
        api_version = t.rt.api_version(t.version)
        body = {
            "kind": t.rt.list_kind,
            "apiVersion": api_version,
            "metadata": meta,
            "items": [self._out(t, o) for o in items],
        }
        return json_response(body)

    async def _create(self, request: web.Request, t: Target) -> web.Response:
        if t.sub is not None:
            raise ApiError(405, "MethodNotAllowed", "POST is not allowed on a subresource")
        body = await self._body(request)
        created = self.store.create(t.rt, body, namespace=t.namespace, **self._write_opts(request))
        return self._respond(request, t, created, 201)

    async def _update(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        body = await self._body(request)
        if not isinstance(body, dict):
            raise ApiError(400, "BadRequest", "the body must be a JSON object")
        if t.sub == "scale":
            return json_response(
                self.store.update_scale(
                    t.rt, t.name, body, namespace=t.namespace, dry_run=request.query.get("dryRun") == "All"
                )
            )
        meta = body.setdefault("metadata", {})
        if isinstance(meta, dict) and meta.get("name", t.name) != t.name:
            raise ApiError(400, "BadRequest", "the name of the object does not match the name on the URL")
        if isinstance(meta, dict):
            meta["name"] = t.name
        updated = self.store.update(t.rt, body, namespace=t.namespace, subresource=t.sub, **self._write_opts(request))
        return self._respond(request, t, updated)

    async def _patch(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        ctype = request.content_type
        if ctype not in _PATCH_TYPES:
            raise ApiError(
                415,
                "UnsupportedMediaType",
                f"the body of the request was in an unknown format - accepted "
                f"media types include: {', '.join(_PATCH_TYPES)}",
            )
        body = await self._body(request, yaml_ok=ctype == patches.APPLY)
        patched = self.store.patch(
            t.rt,
            t.name,
            body,
            namespace=t.namespace,
            patch_type=ctype,
            subresource=t.sub,
            field_manager=request.query.get("fieldManager"),
            **self._write_opts(request),
        )
        return json_response(patched) if t.sub == "scale" else self._respond(request, t, patched)

    async def _delete_options(self, request: web.Request) -> Obj:
        raw = await request.read()
        opts: Obj = {}
        if raw:
            parsed = parse_body(raw, request.content_type)
            if isinstance(parsed, dict):
                opts = parsed
        grace = _int(request.query, "gracePeriodSeconds")
        if grace is not None:
            opts["gracePeriodSeconds"] = grace
        if request.query.get("propagationPolicy"):
            opts["propagationPolicy"] = request.query["propagationPolicy"]
        if request.query.get("dryRun") == "All":
            opts["dryRun"] = ["All"]
        return opts

    async def _delete(self, request: web.Request, t: Target) -> web.Response:
        assert t.name is not None
        opts = await self._delete_options(request)
        gone = self.store.delete(
            t.rt,
            t.name,
            namespace=t.namespace,
            grace_period_seconds=opts.get("gracePeriodSeconds"),
            preconditions=opts.get("preconditions"),
            propagation=opts.get("propagationPolicy"),
            dry_run="All" in (opts.get("dryRun") or []),
        )
        return self._respond(request, t, gone)

    async def _delete_collection(self, request: web.Request, t: Target) -> web.Response:
        opts = await self._delete_options(request)
        q = request.query
        gone = [
            self.store.delete(
                t.rt,
                o["metadata"]["name"],
                namespace=o["metadata"].get("namespace"),
                grace_period_seconds=opts.get("gracePeriodSeconds"),
                propagation=opts.get("propagationPolicy"),
                dry_run="All" in (opts.get("dryRun") or []),
            )
            for o in self.store.select(t.rt, t.namespace, q.get("labelSelector"), q.get("fieldSelector"))
        ]
        return json_response(
            {
                "kind": t.rt.list_kind,
                "apiVersion": t.rt.api_version(t.version),
                "metadata": {"resourceVersion": str(self.store.resource_version)},
                "items": [self._out(t, o) for o in gone],
            }
        )

    # --------------------------------------------------------------------------------- watch

    async def _watch(self, request: web.Request, t: Target) -> web.StreamResponse:
        q = request.query
        raw_rv = q.get("resourceVersion")
        send_initial = _truthy(q.get("sendInitialEvents"))
        since = None if raw_rv in (None, "", "0") or send_initial else _int(q, "resourceVersion")
        timeout = _int(q, "timeoutSeconds")
        as_table = wants_table(request.headers.get("Accept", ""))
        try:
            watch: Watch | None = self.store.subscribe(
                t.rt,
                namespace=t.namespace,
                label_selector=q.get("labelSelector"),
                field_selector=q.get("fieldSelector"),
                resource_version=since,
                initial_events_end=send_initial,
            )
            gone: ApiError | None = None
        except ApiError as e:
            if e.code != 410:
                raise
            watch, gone = None, e
        resp = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        if watch is None:
            assert gone is not None
            await resp.write(_dumps({"type": "ERROR", "object": gone.status()}).encode() + b"\n")
            await resp.write_eof()
            return resp
        try:
            await self._stream(
                request,
                resp,
                t,
                watch,
                timeout=timeout,
                bookmarks=_truthy(q.get("allowWatchBookmarks")),
                as_table=as_table,
            )
            await resp.write_eof()
        except (ConnectionResetError, ConnectionError):
            log.debug("watch client went away", extra={"path": request.path})
        finally:
            watch.close()
        return resp

    async def _stream(
        self,
        request: web.Request,
        resp: web.StreamResponse,
        t: Target,
        watch: Watch,
        *,
        timeout: int | None,
        bookmarks: bool,
        as_table: bool,
    ) -> None:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        api_version = t.rt.api_version(t.version)
        include = request.query.get("includeObject", "Metadata")
        while True:
            wait = self.bookmark_interval
            if deadline is not None:
                wait = min(wait, deadline - loop.time())
                if wait <= 0:
                    return
            try:
                item = await asyncio.wait_for(watch.next(), wait)
            except TimeoutError:
                if request.transport is None or request.transport.is_closing():
                    return
                if bookmarks and watch.idle and (deadline is None or loop.time() < deadline):
                    await resp.write(bookmark(t.rt, t.version, self.store.resource_version))
                continue
            if item is None:
                return
            event_type, event = item
            if as_table and event_type != "BOOKMARK":
                body = table(t.rt, [event.object], now=self.store.clock.wall(), include=include, version=t.version)
                await resp.write(_dumps({"type": event_type, "object": body}).encode() + b"\n")
            else:
                await resp.write(event.encoded(event_type, api_version))
