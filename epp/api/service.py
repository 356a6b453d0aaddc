"""The ``epp.v1`` services (Endpoints, Explain, Config) over a running picker's state.

They read what the request path reads (datastores, the pools' routings and their configurations)
and write nothing: ``Explain`` runs the pool's request pipeline, the code a routed request runs,
with a recorder that records instead of acting (``requestcontrol.recorder.ExplainRecorder``).
Every call is answered between two awaits on the event loop, so it sees one consistent state. A
bad call (unknown pool, no body) ends with ``INVALID_ARGUMENT`` or ``NOT_FOUND`` and never
touches the server. :func:`add_api` registers the three on a gRPC server and returns their names
for reflection.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import grpc

from epp.api import pb
from epp.api.auth import ApiAuthInterceptor
from epp.api.views import by_plugin_name, config_message, endpoint_message, explanation_message
from epp.clock import Clock
from epp.config.reload import ConfigStatus
from epp.datastore.types import DatastoreReader
from epp.errors import EppError, ErrorCode
from epp.extproc.server import ExtraServices
from epp.framework import headers as wire
from epp.framework.request import InferenceRequest
from epp.framework.staleness import Staleness
from epp.requestcontrol.pool_routing import PoolKey, PoolRouting
from epp.requestcontrol.pools import PoolPipelines
from epp.requestcontrol.recorder import ExplainRecorder
from epp.telemetry.metrics_auth import MetricsAuth

__all__ = ["ApiPool", "ApiSources", "add_api"]


class ApiPool(Protocol):
    """One served pool, as the API reads it (``runtime.PoolRuntime``)."""

    @property
    def key(self) -> PoolKey: ...

    @property
    def datastore(self) -> DatastoreReader: ...

    @property
    def routing(self) -> PoolRouting: ...

    @property
    def synced(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class ApiSources:
    """Where each answer comes from; each is read at each call, so reloads show at once."""

    pools: Sequence[ApiPool]
    pipelines: PoolPipelines
    config: ConfigStatus
    """The configuration's source, generation and last reload (kept by the runtime and its watcher)."""
    clock: Clock
    staleness: Staleness
    """``--metrics-staleness-threshold``: what ``metrics_stale`` means."""


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
        answer = pb.ListEndpointsResponse()
        for pool in await _selected(s, request.pool, context):
            namespace, name = pool.key
            answer.pools.append(
                pb.PoolEndpoints(
                    namespace=namespace,
                    name=name,
                    synced=pool.synced,
                    endpoints=[endpoint_message(e, now, s.staleness) for e in pool.datastore.endpoints()],
                    prefix_index_sizes=by_plugin_name(pool.routing.prefix_index_sizes()),
                    metrics_staleness_threshold_seconds=s.staleness.threshold,
                )
            )
        return answer


class _Config(pb.ConfigServicer):  # type: ignore[misc]  # generated base is untyped
    def __init__(self, sources: ApiSources) -> None:
        self._s = sources

    async def GetConfig(self, request: Any, context: Any) -> pb.GetConfigResponse:  # noqa: N802
        s = self._s
        status = s.config
        return pb.GetConfigResponse(
            pools=[config_message(*p.key, p.routing.config) for p in await _selected(s, request.pool, context)],
            source=status.source,
            generation=status.generation,
            last_reload=pb.ReloadResult(
                watched=status.watched, successful=not status.last_error, error=status.last_error
            ),
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
        recorder = ExplainRecorder(inference)
        try:
            pool = self._s.pipelines.pool_for(inference)
            pipeline = pool.pipeline
            ctx = pipeline.parse(inference, request.body, None, recorder)
        except EppError as e:  # a body the picker refuses, or a pool it does not serve
            code = grpc.StatusCode.NOT_FOUND if e.code is ErrorCode.NOT_FOUND else grpc.StatusCode.INVALID_ARGUMENT
            await _abort(context, code, str(e))
            raise  # unreachable: abort raises
        try:
            await pipeline.route(ctx)
        except EppError as e:  # the answer a client would get: part of the explanation
            recorder.explanation.error = e
        return explanation_message("/".join(pool.key), recorder.explanation)


def add_api(server: Any, sources: ApiSources) -> tuple[str, ...]:
    """Register Endpoints, Explain and Config on ``server``; returns their full names (for reflection)."""
    pb.add_EndpointsServicer_to_server(_Endpoints(sources), server)
    pb.add_ExplainServicer_to_server(_Explain(sources), server)
    pb.add_ConfigServicer_to_server(_Config(sources), server)
    return pb.API_SERVICES


def api_services(sources: ApiSources, auth: MetricsAuth | None) -> ExtraServices:
    """The epp.v1 API as the health port's (or its own TLS port's) extra services, guarded by the
    ``/metrics`` authorizer when there is one."""
    interceptors = (ApiAuthInterceptor(auth, "/epp.v1."),) if auth is not None else ()
    return ExtraServices(lambda server: add_api(server, sources), interceptors)
