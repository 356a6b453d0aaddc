"""One picker, many pools: each request goes to the pipeline of the pool it names.

Upstream runs one picker per InferencePool. Here ``--pool-name`` may be repeated; each pool keeps
its own datastore, scrapers, plugin state (prefix index) and metrics labels, so a saturated pool
never changes the decisions for another. The gateway names the pool with the request header
``x-gateway-inference-pool`` (``name`` or ``namespace/name``), typically added by the route
that targets that pool; a request without it goes to the first pool.

The choice is made once per request (the stream keeps the pipeline it was given, the pool's
configuration snapshot, and tells that one when the request is over), and the same way whether one
pool is served or many: a header naming a pool this picker does not serve is refused (404) in both
cases.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Generic, TypeVar

from epp.errors import EppError, ErrorCode
from epp.framework import headers
from epp.framework.request import InferenceRequest
from epp.requestcontrol.pipeline import Pipeline
from epp.requestcontrol.pool_routing import PoolKey, PoolRouting

__all__ = ["PoolDispatcher", "PoolPipelines"]

D = TypeVar("D")


class PoolDispatcher(Generic[D]):
    """Each pool served, by ``(namespace, name)``; the first one is the default."""

    __slots__ = ("_by_key", "_by_name", "_default")

    def __init__(self, pools: Mapping[PoolKey, D]) -> None:
        if not pools:
            raise ValueError("PoolDispatcher needs at least one pool")
        self._by_key = dict(pools)
        self._by_name: dict[str, D | None] = {}
        for (_, name), pool in pools.items():
            # A bare name is ambiguous when two namespaces hold a pool of that name.
            self._by_name[name] = None if name in self._by_name else pool
        self._default = next(iter(pools.values()))

    @property
    def pools(self) -> Mapping[PoolKey, D]:
        return self._by_key

    def pool_for(self, request: InferenceRequest) -> D:
        """The pool named by the request's pool header, else the first pool."""
        wanted = request.headers.get(headers.INFERENCE_POOL)
        if not wanted:
            return self._default
        namespace, _, name = wanted.rpartition("/")
        pool = self._by_key.get((namespace, name)) if namespace else self._by_name.get(name)
        if pool is not None:
            return pool
        if not namespace and name in self._by_name:
            raise EppError(ErrorCode.BAD_REQUEST, f"pool name {name!r} is ambiguous; use namespace/name")
        raise EppError(ErrorCode.NOT_FOUND, f"unknown inference pool {wanted!r}")


class PoolPipelines(PoolDispatcher[PoolRouting]):
    """The pools' routings, and for a request the pipeline in force in its pool."""

    __slots__ = ()

    def pipeline_for(self, request: InferenceRequest) -> Pipeline:
        return self.pool_for(request).pipeline
