"""What the multi-replica cases read of each in-process replica: how many requests it has routed, its precise
producer, its health services."""

from __future__ import annotations

import grpc

from epp.extproc import pb
from epp.plugins.precise_prefix_producer import PrecisePrefixCacheProducer
from epp_sim.stack.picker import InProcessPicker

__all__ = ["health", "precise_producer", "routed"]


def routed(picker: InProcessPicker) -> float:
    """Requests this replica has routed (its own ``inference_objective_request_total``, all series)."""
    return sum(
        sample.value
        for family in picker.runtime.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "inference_objective_request_total"
    )


def precise_producer(picker: InProcessPicker) -> PrecisePrefixCacheProducer:
    """The ``precise-prefix-cache-producer`` of the picker's one pool."""
    (pool,) = picker.runtime.pools
    producer = pool.config.plugins["precise-prefix-cache-producer"]
    assert isinstance(producer, PrecisePrefixCacheProducer)
    return producer


async def health(picker: InProcessPicker, *services: str) -> list[int]:
    """The status of each of ``services`` on the picker's health port."""
    async with grpc.aio.insecure_channel(picker.health_target) as channel:
        stub = pb.HealthStub(channel)
        return [(await stub.Check(pb.HealthCheckRequest(service=s), timeout=5.0)).status for s in services]
