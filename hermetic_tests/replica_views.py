"""What the multi-replica cases read of each in-process replica: how many requests it has routed."""

from __future__ import annotations

from epp_sim.stack.picker import InProcessPicker

__all__ = ["routed"]


def routed(picker: InProcessPicker) -> float:
    """Requests this replica has routed (its own ``inference_objective_request_total``, all series)."""
    return sum(
        sample.value
        for family in picker.runtime.metrics.registry.collect()
        for sample in family.samples
        if sample.name == "inference_objective_request_total"
    )
