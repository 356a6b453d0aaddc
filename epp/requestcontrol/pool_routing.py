"""One pool's routing: its live endpoints, the pipeline of the configuration in force, and the swap to another.

What ``epp serve`` builds for each pool it serves, and what ``epp bench routing`` builds for the
pool it simulates: the same object, so a benchmark measures the picker that serves. It owns

- the pool's :class:`~epp.requestcontrol.pipeline.Pipeline` (one per applied configuration);
- what outlives a configuration: the model rewriter, the conformance round robin, the serving
  recorder and the flow controller (read once from the first configuration: a later one that
  changes the flow-control settings is refused, as queued requests stay where they are);
- the plugins' view of the endpoints: those joining are announced to the configuration's
  observers, those leaving are forgotten (the prefix index frees their entries);
- the swap (:meth:`apply`), in one loop step: stateful plugins hand their state to their new
  instances (same name and type), the new plugins learn the endpoints present, and the replaced
  configuration's background resources are closed.

Health feedback is the pipeline's ``finished``; the endpoints' health state itself lives on them.
What the plugins of the configuration in force measure of themselves (their prefix indexes' sizes,
their KV events) is read here, for ``/metrics`` (:meth:`PoolRouting.measure`) and the epp.v1
Endpoints API (:meth:`PoolRouting.prefix_index_sizes`) alike, so the two always agree.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Sequence
from dataclasses import dataclass

from epp.clock import Clock
from epp.config.loader import ConfigError, LoadedConfig
from epp.datastore.store import Datastore
from epp.flowcontrol.controller import FlowController
from epp.framework.endpoint import EndpointState
from epp.framework.measures import Measurements
from epp.framework.plugin import StatefulPlugin
from epp.framework.producers import AsyncClosable
from epp.framework.staleness import FLAG_DEFAULT, Staleness
from epp.requestcontrol.conformance import RoundRobin
from epp.requestcontrol.pipeline import Pipeline, PoolParts
from epp.requestcontrol.plugin_series import Readings
from epp.requestcontrol.recorder import ServingRecorder
from epp.requestcontrol.rewrites import ModelRewriter
from epp.tasks import TaskSet
from epp.telemetry.metrics import EppMetrics

__all__ = ["PoolKey", "PoolRouting", "RoutingOptions"]

log = logging.getLogger(__name__)

PoolKey = tuple[str, str]  # (namespace, name)


@dataclass(frozen=True, slots=True)
class RoutingOptions:
    """The routing switches that come from flags, not from the configuration."""

    staleness: Staleness = FLAG_DEFAULT
    """``--metrics-staleness-threshold`` (the health tiers' freshness; admission has the detector's own)."""
    emit_endpoint_scores: bool = False
    conformance_hooks: bool = False


class PoolRouting:
    """The routing of one pool: ``start`` / ``stop`` run its flow controller, ``aclose`` closes its plugins
    (once no stream can use them any more)."""

    def __init__(
        self,
        key: PoolKey,
        datastore: Datastore,
        config: LoadedConfig,
        *,
        metrics: EppMetrics,
        clock: Clock,
        rng: random.Random,
        options: RoutingOptions | None = None,
    ) -> None:
        self.key = key
        self.datastore = datastore
        self._metrics = metrics
        options = options or RoutingOptions()
        settings = config.flow_control
        self.flow_control = (
            None
            if settings is None
            else FlowController(
                settings,
                pool_name=key[1],
                endpoints=datastore.endpoints,
                detector=lambda: self.pipeline.config.saturation_detector,
                clock=clock,
                metrics=metrics,
            )
        )
        self._parts = PoolParts(
            name=key[1],
            datastore=datastore,
            clock=clock,
            rng=rng,
            rewriter=ModelRewriter(rng),
            recorder=ServingRecorder(metrics, key[1]),
            staleness=options.staleness,
            emit_scores=options.emit_endpoint_scores,
            turns=RoundRobin() if options.conformance_hooks else None,
            flow_control=self.flow_control,
        )
        self.pipeline = Pipeline(self._parts, config, metrics)
        self._closing = TaskSet()
        """The closing of replaced configurations' plugins (:meth:`apply`), awaited by :meth:`aclose`."""
        self._unsubscribe = datastore.subscribe(self._endpoints_changed)
        present = datastore.endpoints()
        if present:
            for observer in config.endpoints_added:
                observer.endpoints_added(present)

    @property
    def config(self) -> LoadedConfig:
        """The configuration in force."""
        return self.pipeline.config

    async def start(self) -> None:
        if self.flow_control is not None:
            await self.flow_control.start()

    async def stop(self) -> None:
        """Queued requests end (503, shutting down)."""
        if self.flow_control is not None:
            await self.flow_control.stop()

    async def aclose(self) -> None:
        """Stop following the endpoints and close every plugin's background resources (subscribers, clients)."""
        self._unsubscribe()
        await self._closing.wait()
        await close_all(self.config.closables)

    def refusal(self, config: LoadedConfig) -> ConfigError | None:
        """Why ``config`` cannot replace the one in force (it changes flow control), or None."""
        running = self.flow_control.settings.fingerprint() if self.flow_control is not None else None
        new = config.flow_control
        if (new.fingerprint() if new is not None else None) != running:
            return ConfigError(
                "flowControl: the flow-control gate and settings are read once at startup (queued requests "
                "stay where they are); restart the picker to change them"
            )
        return None

    def apply(self, config: LoadedConfig) -> None:
        """Put ``config`` in force, in this loop step (see the module docstring)."""
        old = self.config
        for name, plugin in config.plugins.items():
            before = old.plugins.get(name)
            if (
                isinstance(plugin, StatefulPlugin)
                and before is not None
                and before.typed_name.type == plugin.typed_name.type
            ):
                plugin.inherit(before)
        self.pipeline = Pipeline(self._parts, config, self._metrics)
        present = self.datastore.endpoints()
        if present:
            for observer in config.endpoints_added:
                observer.endpoints_added(present)
        if old.closables:
            self._closing.start(close_all(old.closables), f"epp-close-replaced-plugins-{self.key[1]}")

    def measure(self, into: Measurements) -> None:
        """What the plugins of the configuration in force measure (``/metrics`` asks every pool into one)."""
        for plugin in self.config.measured:
            plugin.measure(into)

    def prefix_index_sizes(self) -> dict[tuple[str, str], int]:
        """Entries of every prefix index of the configuration in force, by the plugin (name, type) owning it."""
        return Readings.of(self.config.measured).index_sizes

    def _endpoints_changed(self, added: Sequence[EndpointState], removed: Sequence[EndpointState]) -> None:
        config = self.config
        if removed:
            keys = [s.endpoint.key for s in removed]
            for forgetter in config.endpoint_observers:
                forgetter.endpoints_removed(keys)
        if added:
            for learner in config.endpoints_added:
                learner.endpoints_added(added)


async def close_all(closables: Sequence[AsyncClosable]) -> None:
    """Close each, logging (not raising) a failure so the others still close."""
    for closable in closables:
        try:
            await closable.aclose()
        except Exception:  # one plugin's failure must not keep the others open
            log.exception("closing a plugin failed")
