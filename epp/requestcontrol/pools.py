"""One picker, many pools: route each request to the Director of the pool it names.

Upstream runs one picker per InferencePool. Here ``--pool-name`` may be repeated; each pool keeps
its own datastore, scrapers, plugin state (prefix index) and metrics labels, so a saturated pool
never changes the decisions for another. The gateway names the pool with the request header
``x-gateway-inference-pool`` (``name`` or ``namespace/name``), typically added by the route
that targets that pool; a request without it goes to the first pool.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from epp.errors import EppError, ErrorCode
from epp.framework.request import InferenceRequest, RoutingDecision

__all__ = ["POOL_HEADER", "PoolDispatcher", "PoolDirector"]

POOL_HEADER = "x-gateway-inference-pool"


class PoolDirector(Protocol):
    """The part of the Director contract the dispatcher forwards."""

    def route(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision: ...

    def route_headers_only(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision: ...

    def finished(self, request: InferenceRequest, decision: RoutingDecision | None, *, completed: bool) -> None: ...


class PoolDispatcher:
    """A Director that forwards to the pool named by the request (first pool by default)."""

    def __init__(self, directors: Mapping[tuple[str, str], PoolDirector], *, header: str = POOL_HEADER) -> None:
        if not directors:
            raise ValueError("PoolDispatcher needs at least one pool")
        self._by_key = dict(directors)
        self._by_name: dict[str, PoolDirector | None] = {}
        for (_, name), director in directors.items():
            # A bare name is ambiguous when two namespaces hold a pool of that name.
            self._by_name[name] = None if name in self._by_name else director
        self._default = next(iter(directors.values()))
        self._header = header
        self._owner: dict[int, PoolDirector] = {}

    def _select(self, request: InferenceRequest) -> PoolDirector:
        wanted = request.headers.get(self._header)
        if not wanted:
            return self._default
        namespace, _, name = wanted.rpartition("/")
        director = self._by_key.get((namespace, name)) if namespace else self._by_name.get(name)
        if director is None:
            if not namespace and name in self._by_name:
                raise EppError(ErrorCode.BAD_REQUEST, f"pool name {name!r} is ambiguous; use namespace/name")
            raise EppError(ErrorCode.NOT_FOUND, f"unknown inference pool {wanted!r}")
        return director

    def route(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        director = self._select(request)
        decision = director.route(request, subset)
        self._owner[id(decision)] = director
        return decision

    def route_headers_only(self, request: InferenceRequest, subset: frozenset[str] | None) -> RoutingDecision:
        director = self._select(request)
        decision = director.route_headers_only(request, subset)
        self._owner[id(decision)] = director
        return decision

    def finished(self, request: InferenceRequest, decision: RoutingDecision | None, *, completed: bool) -> None:
        director = self._owner.pop(id(decision), None) if decision is not None else None
        if director is not None:
            director.finished(request, decision, completed=completed)
