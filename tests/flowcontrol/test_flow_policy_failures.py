"""Flow-control plugins that fail: the queue goes on by a fixed rule, and each failure is counted and logged.

docs/plugins.md ("When a plugin fails"): an ordering policy that fails orders first come, first
served; a fairness policy that fails is replaced by round-robin; a usage-limit policy that fails
gives every band the ceiling 1.0; a saturation detector that fails reads 0 (1.0 while the pool
has no endpoint). Nothing raises into the request that is being queued, and nothing stays queued
for a request that was refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest
from flow_harness import BUSY, IDLE, Pool, dispatched, started

from epp.framework.endpoint import EndpointState
from epp.framework.flowcontrol import FlowView, QueuedRequest
from epp.framework.plugin import NamedPlugin, PluginKind

ERRORS = "epp_plugin_errors_total"


class RaisingOrdering(NamedPlugin):
    plugin_type = "raising-ordering"
    kinds = frozenset({PluginKind.ORDERING_POLICY})

    def key(self, item: QueuedRequest) -> tuple[float, ...]:
        raise KeyError("x-deadline")


class StringOrdering(NamedPlugin):
    plugin_type = "string-ordering"
    kinds = frozenset({PluginKind.ORDERING_POLICY})

    def key(self, item: QueuedRequest) -> tuple[float, ...]:
        return ("soon",)  # type: ignore[return-value]  # the broken contract under test


class RaisingFairness(NamedPlugin):
    plugin_type = "raising-fairness"
    kinds = frozenset({PluginKind.FAIRNESS_POLICY})

    def pick(self, flows: Sequence[FlowView], last: str | None) -> FlowView | None:
        raise RuntimeError("tenant table not loaded")


class ForeignFairness(NamedPlugin):
    plugin_type = "foreign-fairness"
    kinds = frozenset({PluginKind.FAIRNESS_POLICY})

    def pick(self, flows: Sequence[FlowView], last: str | None) -> FlowView | None:
        return flows[0].fairness_id  # type: ignore[return-value]  # the broken contract under test


class RaisingUsageLimit(NamedPlugin):
    plugin_type = "raising-usage-limit"
    kinds = frozenset({PluginKind.USAGE_LIMIT_POLICY})

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        raise ValueError("no budget")


class ShortUsageLimit(NamedPlugin):
    plugin_type = "short-usage-limit"
    kinds = frozenset({PluginKind.USAGE_LIMIT_POLICY})

    def ceilings(self, saturation: float, priorities: Sequence[int]) -> Sequence[float]:
        return [0.0]  # one band's ceiling, whatever the number of bands


class RaisingDetector(NamedPlugin):
    plugin_type = "raising-detector"
    kinds = frozenset({PluginKind.SATURATION_DETECTOR})

    def saturation(self, candidates: Sequence[EndpointState], now: float) -> float:
        raise ZeroDivisionError("no capacity known")


PLUGINS = (
    RaisingOrdering,
    StringOrdering,
    RaisingFairness,
    ForeignFairness,
    RaisingUsageLimit,
    ShortUsageLimit,
    RaisingDetector,
)


async def pool_with(make: Callable[..., Pool], plugin: type[NamedPlugin], section: str) -> Pool:
    """A started pool whose ``flowControl`` section has ``section`` (``TYPE`` in it: ``plugin``'s type) and no TTL."""
    flow_control = f"  defaultRequestTTL: 0s\n  {section.replace('TYPE', plugin.plugin_type)}\n"
    return await started(make(flow_control, extra=f"- type: {plugin.plugin_type}\n", plugins=PLUGINS))


def failures(pool: Pool, point: str, plugin: type[NamedPlugin], reason: str) -> float | None:
    name = plugin.plugin_type
    return pool.sample(ERRORS, extension_point=point, plugin_type=name, plugin_name=name, reason=reason)


def dispatch_all(pool: Pool, items: list[object]) -> list[str]:
    """Run one dispatch cycle per item; the order the items left in."""
    order: list[str] = []
    for _ in items:
        before = set(dispatched(pool.items))
        pool.fc.cycle()
        order += sorted(set(dispatched(pool.items)) - before)
    return order


@pytest.mark.parametrize(("plugin", "reason"), [(RaisingOrdering, "exception"), (StringOrdering, "malformed")])
async def test_a_failing_ordering_policy_orders_first_come_first_served(
    make: Callable[..., Pool], plugin: type[NamedPlugin], reason: str
) -> None:
    pool = await pool_with(make, plugin, "defaultPriorityBand: {orderingPolicyRef: TYPE}")
    items: list[object] = [pool.enqueue(pool.request(tenant="a")) for _ in range(3)]  # queued, not refused
    assert pool.fc.queued == 3 and failures(pool, "OrderingPolicy", plugin, reason) == 3
    pool.endpoints = [IDLE]
    assert dispatch_all(pool, items) == ["r1", "r2", "r3"]


@pytest.mark.parametrize(("plugin", "reason"), [(RaisingFairness, "exception"), (ForeignFairness, "malformed")])
async def test_a_failing_fairness_policy_is_replaced_by_round_robin(
    make: Callable[..., Pool], plugin: type[NamedPlugin], reason: str
) -> None:
    pool = await pool_with(make, plugin, "defaultPriorityBand: {fairnessPolicyRef: TYPE}")
    items: list[object] = [pool.enqueue(pool.request(tenant=t)) for t in ("a", "a", "a", "b", "b")]
    assert pool.fc.queued == 5
    pool.endpoints = [IDLE]
    assert dispatch_all(pool, items) == ["r1", "r4", "r2", "r5", "r3"]  # a, b, a, b, a
    assert failures(pool, "FairnessPolicy", plugin, reason) == 5  # once a dispatch (saturated at enqueue: no pick)


@pytest.mark.parametrize(("plugin", "reason"), [(RaisingUsageLimit, "exception"), (ShortUsageLimit, "malformed")])
async def test_a_failing_usage_limit_policy_gives_every_band_the_ceiling_one(
    make: Callable[..., Pool], plugin: type[NamedPlugin], reason: str
) -> None:
    pool = await pool_with(make, plugin, "priorityBands: [{priority: 5}]\n  usageLimitPolicyPluginRef: TYPE")
    items: list[object] = [pool.enqueue(pool.request(priority=p)) for p in (0, 5)]
    pool.fc.cycle()
    assert dispatched(pool.items) == [] and pool.fc.queued == 2  # saturated (1.0): under no ceiling of 1.0
    pool.endpoints = [IDLE]
    assert dispatch_all(pool, items) == ["r2", "r1"]  # each band under its ceiling, by priority
    assert failures(pool, "UsageLimitPolicy", plugin, reason) == 2 + 1 + 2


async def test_a_failing_saturation_detector_dispatches_unless_the_pool_is_empty(make: Callable[..., Pool]) -> None:
    pool = await pool_with(make, RaisingDetector, "saturationDetector: {pluginRef: TYPE}")
    pool.endpoints = []
    items: list[object] = [pool.enqueue(pool.request()) for _ in range(2)]
    assert pool.fc.queued == 2  # an empty pool holds its queue, as when the detector reads 1.0
    pool.endpoints = [BUSY]  # saturated, but the detector cannot say so: not saturated (fail open)
    assert dispatch_all(pool, items) == ["r1", "r2"]
    assert failures(pool, "SaturationDetector", RaisingDetector, "exception") == 2 + 2
