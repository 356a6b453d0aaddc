"""The ``epp.v1`` services (Endpoints, Explain, Config) over a running picker's state.

They read what the request path reads (datastores, the current configurations, the directors)
and write nothing: ``Explain`` asks a pool's director for its dry run
(:meth:`~epp.requestcontrol.director.PoolDirector.explain`), the same code a routed request runs.
Every call is answered between two awaits on the event loop, so it sees one consistent state. A
bad call (unknown pool, no body) ends with ``INVALID_ARGUMENT`` or ``NOT_FOUND`` and never
touches the server. :func:`add_api` registers the three on a gRPC server and returns their names
for reflection.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from epp.api import pb
from epp.api.views import config_message, endpoint_message, explanation_message, prefix_index_sizes
from epp.clock import Clock
from epp.config.loader import LoadedConfig
from epp.datastore.types import DatastoreReader
from epp.errors import EppError, ErrorCode
from epp.extproc.request_body import parse_request_body
from epp.framework import headers as wire
from epp.framework.parsing import request_path
from epp.framework.request import InferenceRequest
from epp.requestcontrol.director import PoolDirector
from epp.requestcontrol.pools import PoolDispatcher, PoolKey

__all__ = ["ApiPool", "ApiSources", "add_api"]


class ApiPool(Protocol):
    """One served pool, as the API reads it (``runtime.PoolRuntime``)."""

    @property
    def key(self) -> PoolKey: ...

    @property
    def datastore(self) -> DatastoreReader: ...

    @property
    def director(self) -> PoolDirector: ...

    @property
    def synced(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ApiSources:
    """Where each answer comes from; callables are read at each call, so reloads show at once."""

    pools: Sequence[ApiPool]
    directors: PoolDispatcher[PoolDirector]
    configs: Callable[[], Mapping[PoolKey, LoadedConfig]]
    generation: Callable[[], int]
    last_reload: Callable[[], tuple[bool, str]]
    """(the file is watched, why its last change was rejected or "")."""
    config_source: str
    clock: Clock
    staleness_threshold: float


async def _abort(context: Any, code: grpc.StatusCode, message: str) -> None:
    await context.abort(code, message)


async def _selected(sources: ApiSources, wanted: str, context: Any) -> list[ApiPool]:
    """Every pool, or the one ``wanted`` names (``namespace/name`` or ``name``); NOT_FOUND otherwise."""
    if not wanted:
        return list(sources.pools)
    namespace, _, name = wanted.rpartition("/")
    chosen = [p for p in sources.pools if p.key[1] == name and (not namespace or p.key[0] == namespace)]
    if len(chosen) != 1:
        problem = "is ambiguous; use namespace/name" if chosen else "is not served by this picker"
        await _abort(context, grpc.StatusCode.NOT_FOUND, f"pool {wanted!r} {problem}")
    return chosen


class _Endpoints(pb.EndpointsServicer):  # type: ignore[misc]  # generated base is untyped
    def __init__(self, sources: ApiSources) -> None:
        self._s = sources

    async def ListEndpoints(self, request: Any, context: Any) -> pb.ListEndpointsResponse:  # noqa: N802
        s = self._s
        now = s.clock.now()
        configs = s.configs()
        answer = pb.ListEndpointsResponse()
        for pool in await _selected(s, request.pool, context):
            namespace, name = pool.key
            answer.pools.append(
                pb.PoolEndpoints(
                    namespace=namespace,
                    name=name,
                    synced=pool.synced,
                    endpoints=[endpoint_message(e, now, s.staleness_threshold) for e in pool.datastore.endpoints()],
                    prefix_index_sizes=prefix_index_sizes(configs[pool.key]),
                    metrics_staleness_threshold_seconds=s.staleness_threshold,
                )
            )
        return answer


class _Config(pb.ConfigServicer):  # type: ignore[misc]  # generated base is untyped
    def __init__(self, sources: ApiSources) -> None:
        self._s = sources

    async def GetConfig(self, request: Any, context: Any) -> pb.GetConfigResponse:  # noqa: N802
        s = self._s
        configs = s.configs()
        watched, error = s.last_reload()
        return pb.GetConfigResponse(
            pools=[config_message(*p.key, configs[p.key]) for p in await _selected(s, request.pool, context)],
            source=s.config_source,
            generation=s.generation(),
            last_reload=pb.ReloadResult(watched=watched, successful=not error, error=error),
        )


class _Explain(pb.ExplainServicer):  # type: ignore[misc]  # generated base is untyped
    def __init__(self, sources: ApiSources) -> None:
        self._s = sources

    async def Explain(self, request: Any, context: Any) -> pb.ExplainResponse:  # noqa: N802
        if not request.body:
            await _abort(
                context,
                grpc.StatusCode.INVALID_ARGUMENT,
                "Explain needs the request's JSON body (a request without one goes to a random endpoint)",
            )
        headers = {k.lower(): v for k, v in request.headers.items()}
        inference = InferenceRequest(request_id=headers.get(wire.REQUEST_ID) or f"explain-{uuid.uuid4()}")
        inference.headers = headers
        try:
            director = self._s.directors.director_for(inference)
            parsed = parse_request_body(request.body, director.api_for(request_path(headers)))
        except EppError as e:  # a body the picker refuses, or a pool it does not serve
            code = grpc.StatusCode.NOT_FOUND if e.code is ErrorCode.NOT_FOUND else grpc.StatusCode.INVALID_ARGUMENT
            await _abort(context, code, str(e))
            raise  # unreachable: abort raises
        parsed.apply_to(inference, len(request.body))
        pending = director.prepare(inference)  # data producers (token-producer), as for a real request
        if pending is not None:
            await pending
        explanation = director.explain(inference, None)
        key = next(p.key for p in self._s.pools if p.director is director)
        return explanation_message("/".join(key), explanation)


def add_api(server: Any, sources: ApiSources) -> tuple[str, ...]:
    """Register Endpoints, Explain and Config on ``server``; returns their full names (for reflection)."""
    pb.add_EndpointsServicer_to_server(_Endpoints(sources), server)
    pb.add_ExplainServicer_to_server(_Explain(sources), server)
    pb.add_ConfigServicer_to_server(_Config(sources), server)
    return pb.API_SERVICES
