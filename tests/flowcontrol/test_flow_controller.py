"""The flow controller on an injected clock: queueing, dispatch gating, priority, fairness, capacity, TTL, cancel."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from flow_harness import BUSY, IDLE, Pool, dispatched, started

from epp.errors import EppError
from epp.flowcontrol.queues import Item
from epp_sim.waits import wait_until

HEADER = "x-llm-d-request-dropped-reason"


def error(item: Item) -> EppError:
    exc = item.future.exception()
    assert isinstance(exc, EppError)
    return exc


async def test_requests_queue_while_saturated_and_dispatch_when_it_clears(make: Callable[..., Pool]) -> None:
    pool = await started(make())
    items = [pool.enqueue(pool.request(tenant="a")) for _ in range(3)]
    assert pool.fc.queued == 3 and dispatched(items) == []
    labels = {"fairness_id": "a", "priority": "0", "inference_pool": "pool", "model_name": "m"}
    labels["target_model_name"] = "m"
    assert pool.sample("llm_d_epp_flow_control_queue_size", **labels) == 3
    assert pool.sample("inference_extension_flow_control_queue_bytes", **labels) == 300
    assert pool.sample("llm_d_epp_flow_control_pool_saturation", inference_pool="pool", stage="effective") == 1.0

    pool.endpoints = [IDLE]
    for n in (1, 2, 3):  # one per dispatch cycle, on the loop's ticker
        await wait_until(lambda: pool.clock.sleepers > 0)
        pool.clock.advance(0.001)
        await wait_until(lambda n=n: len(dispatched(items)) == n)  # type: ignore[misc]
    assert dispatched(items) == ["r1", "r2", "r3"]
    assert pool.sample("llm_d_epp_flow_control_queue_size", **labels) == 0
    assert (
        pool.sample("llm_d_epp_flow_control_requests_total", outcome="Dispatched", priority="0", inference_pool="pool")
        == 3
    )


async def test_an_idle_pool_dispatches_at_enqueue(make: Callable[..., Pool]) -> None:
    pool = await started(make())
    pool.endpoints = [IDLE]
    item = pool.enqueue(pool.request())
    assert item.future.done() and item.future.exception() is None and pool.fc.queued == 0


async def test_higher_priority_bands_dispatch_first(make: Callable[..., Pool]) -> None:
    pool = make()
    await pool.fc.start()
    low = [pool.enqueue(pool.request(priority=-1)) for _ in range(2)]
    high = pool.enqueue(pool.request(priority=10))
    mid = pool.enqueue(pool.request(priority=0))
    pool.endpoints = [IDLE]
    order: list[str] = []
    for _ in range(4):
        before = set(dispatched([*low, high, mid]))
        pool.fc.cycle()
        order += sorted(set(dispatched([*low, high, mid])) - before)
    assert order == ["r3", "r4", "r1", "r2"]


async def test_a_saturated_pool_blocks_every_band(make: Callable[..., Pool]) -> None:
    pool = await started(make("  defaultRequestTTL: 0s\n  priorityBands: [{priority: 5}]\n"))
    items = [pool.enqueue(pool.request(priority=p)) for p in (5, 0, -3)]
    for _ in range(5):
        pool.fc.cycle()
    assert dispatched(items) == [] and pool.fc.queued == 3


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        ("global-strict-fairness-policy", ["r1", "r2", "r3", "r4", "r5"]),  # one FCFS queue over the band
        ("round-robin-fairness-policy", ["r1", "r4", "r2", "r5", "r3"]),  # a, b, a, b, a
    ],
)
async def test_fairness_between_tenants(make: Callable[..., Pool], policy: str, expected: list[str]) -> None:
    pool = await started(
        make(
            f"  defaultRequestTTL: 0s\n  defaultPriorityBand: {{fairnessPolicyRef: {policy}}}\n",
            extra=f"- type: {policy}\n",
        )
    )
    items = [pool.enqueue(pool.request(tenant=t)) for t in ("a", "a", "a", "b", "b")]
    pool.endpoints = [IDLE]
    order: list[str] = []
    for _ in range(5):
        before = set(dispatched(items))
        pool.fc.cycle()
        order += list(set(dispatched(items)) - before)
    assert order == expected


async def test_the_fairness_header_has_both_names(make: Callable[..., Pool]) -> None:
    pool = await started(make())
    pool.enqueue(pool.request(tenant="gie"))
    llm_d = pool.request()
    llm_d.headers = {"x-llm-d-inference-fairness-id": "llmd"}
    pool.enqueue(llm_d)
    pool.enqueue(pool.request())
    for tenant in ("gie", "llmd", "default-flow"):
        labels = {"fairness_id": tenant, "priority": "0", "inference_pool": "pool", "model_name": "m"}
        assert pool.sample("llm_d_epp_flow_control_queue_size", **labels, target_model_name="m") == 1


async def test_capacity_limits_reject_with_the_upstream_status_and_reason(make: Callable[..., Pool]) -> None:
    pool = await started(
        make("  defaultRequestTTL: 0s\n  maxRequests: 3\n  priorityBands: [{priority: 0, maxRequests: 2}]\n")
    )
    pool.enqueue(pool.request())
    pool.enqueue(pool.request())
    with pytest.raises(EppError) as band_full:  # the band holds 2
        pool.enqueue(pool.request())
    assert band_full.value.code.http_status == 429 and band_full.value.headers == {HEADER: "rejected-saturated"}
    assert str(band_full.value) == "inference error: ResourceExhausted - request rejected pre-queue: queue at capacity"
    pool.enqueue(pool.request(priority=1))  # another band, global count 3
    pool.endpoints = []
    with pytest.raises(EppError) as no_endpoints:  # global limit, and the pool is empty
        pool.enqueue(pool.request(priority=2))
    assert no_endpoints.value.code.http_status == 503
    assert no_endpoints.value.headers == {HEADER: "rejected-no-endpoints"}
    assert (
        pool.sample(
            "llm_d_epp_flow_control_requests_total", outcome="RejectedCapacity", priority="0", inference_pool="pool"
        )
        == 1
    )


async def test_byte_limits(make: Callable[..., Pool]) -> None:
    pool = await started(make("  defaultRequestTTL: 0s\n  maxBytes: 1Ki\n"))
    pool.enqueue(pool.request(size=1000))
    with pytest.raises(EppError):
        pool.enqueue(pool.request(size=25))
    pool.enqueue(pool.request(size=24))
    assert pool.fc.queued_bytes == 1024


async def test_ttl_expiry_and_the_no_endpoint_budget(make: Callable[..., Pool]) -> None:
    pool = await started(make("  defaultRequestTTL: 5s\n  noEndpointRequestTTL: 20s\n"))
    first = pool.enqueue(pool.request())
    pool.clock.advance(4.0)
    second = pool.enqueue(pool.request())
    pool.clock.advance(1.0)
    pool.fc.cycle()
    assert first.future.done() and not second.future.done()
    assert error(first).code.http_status == 429 and error(first).headers == {HEADER: "rejected-ttl-expired"}
    assert pool.fc.queued == 1

    pool.endpoints = []  # the pool empties: the no-endpoint budget starts now for everyone
    pool.fc.cycle()
    pool.clock.advance(19.0)
    pool.fc.cycle()
    assert not second.future.done()
    pool.clock.advance(1.0)
    pool.fc.cycle()
    assert error(second).code.http_status == 503 and error(second).headers == {HEADER: "rejected-no-endpoints"}
    assert "request timed out in queue and no endpoints are available" in str(error(second))
    assert pool.fc.queued == 0


async def test_endpoints_coming_back_start_a_fresh_ttl(make: Callable[..., Pool]) -> None:
    pool = await started(make("  defaultRequestTTL: 5s\n  noEndpointRequestTTL: 60s\n"))
    pool.endpoints = []
    item = pool.enqueue(pool.request())
    pool.clock.advance(30.0)
    pool.endpoints = [BUSY]  # back, but busy: a fresh 5 s budget from now
    pool.fc.cycle()
    pool.clock.advance(4.9)
    pool.fc.cycle()
    assert not item.future.done()
    pool.clock.advance(0.1)
    pool.fc.cycle()
    assert error(item).headers == {HEADER: "rejected-ttl-expired"}


async def test_a_cancelled_waiter_leaves_the_queue_at_once(make: Callable[..., Pool]) -> None:
    pool = await started(make())
    item = pool.enqueue(pool.request(tenant="a"))
    other = pool.enqueue(pool.request(tenant="a"))
    waiting = asyncio.Event()

    async def stream() -> None:
        waiting.set()
        await pool.fc.wait(item)  # no suspension between the two: the stream is waiting once the event is set

    waiter = asyncio.create_task(stream())
    await waiting.wait()
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert pool.fc.queued == 1
    labels = {"fairness_id": "a", "priority": "0", "inference_pool": "pool", "model_name": "m"}
    assert pool.sample("llm_d_epp_flow_control_queue_size", **labels, target_model_name="m") == 1
    assert (
        pool.sample(
            "llm_d_epp_flow_control_request_queue_duration_seconds_count",
            **labels,
            target_model_name="m",
            outcome="EvictedContextCancelled",
        )
        == 1
    )
    pool.endpoints = [IDLE]
    pool.fc.cycle()
    assert dispatched([other]) == ["r2"]


async def test_stop_ends_every_queued_request_with_shutting_down(make: Callable[..., Pool]) -> None:
    pool = await started(make())
    item = pool.enqueue(pool.request())
    await pool.fc.stop()
    assert error(item).code.http_status == 503 and error(item).headers == {HEADER: "rejected-shutting-down"}
    with pytest.raises(EppError, match="shutting down"):
        pool.enqueue(pool.request())


async def test_unlisted_priorities_clone_the_default_bands(make: Callable[..., Pool]) -> None:
    pool = await started(
        make(
            "  defaultRequestTTL: 0s\n  defaultPriorityBand: {maxRequests: 2}\n"
            "  defaultNegativePriorityBand: {maxRequests: 1}\n"
        )
    )
    pool.enqueue(pool.request(priority=-4))
    with pytest.raises(EppError):
        pool.enqueue(pool.request(priority=-4))
    pool.enqueue(pool.request(priority=7))
    pool.enqueue(pool.request(priority=7))
    with pytest.raises(EppError):
        pool.enqueue(pool.request(priority=7))
