"""A pool's real routing (``PoolRouting`` and its pipeline) over a real Datastore, with a manual clock, for tests."""

from __future__ import annotations

import random

from scheduling_builders import NOW

from epp.clock import ManualClock
from epp.config.loader import LoadedConfig, load_config, load_default_config
from epp.datalayer.http_client import SessionClient
from epp.datastore.store import Datastore
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.plugins import register_in_tree
from epp.requestcontrol.context import RequestContext
from epp.requestcontrol.pipeline import Pipeline
from epp.requestcontrol.pool_routing import PoolRouting, RoutingOptions
from epp.telemetry.metrics import EppMetrics


class Harness:
    """``await h.route("m")`` routes a request for model ``m`` through the pool's pipeline; ``h.last`` is its
    decision and ``h.ctx`` its context."""

    def __init__(
        self,
        store: Datastore,
        *,
        config_text: str | None = None,
        registry: PluginRegistry | None = None,
        options: RoutingOptions | None = None,
        metrics: EppMetrics | None = None,
        allow_experimental_plugins: bool = False,
    ) -> None:
        self.store = store
        self.clock = ManualClock(start=NOW)
        self.metrics = metrics or EppMetrics()
        if registry is None:
            registry = PluginRegistry()
            register_in_tree(registry)
        self.registry = registry
        self.http = SessionClient()
        """The plugins' HTTP client, as the runtime hands it; a test that routes through one closes it."""
        context = PluginContext(clock=self.clock, seed=7, http=self.http)
        config: LoadedConfig
        if config_text is None:
            config = load_default_config(registry, context)
        else:
            config = load_config(config_text, registry, context, allow_experimental_plugins=allow_experimental_plugins)
        self.routing = PoolRouting(
            ("default", "pool"),
            store,
            config,
            metrics=self.metrics,
            clock=self.clock,
            rng=random.Random(3),
            options=options or RoutingOptions(),
        )
        self.last: RoutingDecision | None = None
        self.ctx: RequestContext | None = None

    @property
    def config(self) -> LoadedConfig:
        return self.routing.config

    @property
    def pipeline(self) -> Pipeline:
        return self.routing.pipeline

    async def decide(self, request: InferenceRequest, subset: frozenset[str] | None = None) -> RoutingDecision:
        """Route ``request`` (no body: its model set directly) and return the decision."""
        ctx = self.ctx = self.pipeline.context(request, subset)
        decision = self.last = await self.pipeline.route(ctx)
        return decision

    async def route(self, model: str = "m", subset: frozenset[str] | None = None, **headers: str) -> InferenceRequest:
        """Route a request for ``model`` with ``headers`` (``x_y`` spells ``x-y``); returns the request."""
        request = InferenceRequest(
            request_id="r", model=model, headers={k.replace("_", "-"): v for k, v in headers.items()}
        )
        await self.decide(request, subset)
        return request

    def headers_only(self, request: InferenceRequest, subset: frozenset[str] | None = None) -> RoutingDecision:
        ctx = self.ctx = self.pipeline.context(request, subset)
        decision = self.last = self.pipeline.route_headers_only(ctx)
        return decision

    def finished(self, ctx: RequestContext, *, completed: bool, status: int = 0, gateway_reply: bool = False) -> None:
        self.pipeline.finished(ctx, completed=completed, status=status, gateway_reply=gateway_reply)
