"""The pure decision: thresholds at their edges, cost ordering, one step, pending, limits, idle."""

from __future__ import annotations

import pytest

from epp.autoscale.analysis import VariantInput, analyze_saturation, decide
from epp.autoscale.decision import Reason
from epp.autoscale.saturation_config import SaturationConfig
from epp.autoscale.types import ReplicaMetrics, VariantKey

CFG = SaturationConfig()  # 0.80 / 5 / 0.10 / 3


def reps(*loads: tuple[float, float], prefix: str = "p") -> tuple[ReplicaMetrics, ...]:
    return tuple(ReplicaMetrics(f"{prefix}{i}", kv, q) for i, (kv, q) in enumerate(loads))


def variant(
    name: str, cost: float, *loads: tuple[float, float], current: int | None = None, **kw: object
) -> VariantInput:
    r = reps(*loads, prefix=name)
    return VariantInput(VariantKey("ns", name), cost, len(r) if current is None else current, r, **kw)  # type: ignore[arg-type]


def by_name(decisions: list) -> dict:  # type: ignore[type-arg]
    return {d.variant.name: d for d in decisions}


class TestSaturationEdges:
    def test_kv_exactly_at_threshold_is_saturated(self) -> None:
        sat = analyze_saturation(reps((0.80, 0), (0.5, 0)), CFG)
        assert sat.non_saturated == 1

    def test_queue_exactly_at_threshold_is_saturated(self) -> None:
        sat = analyze_saturation(reps((0.1, 5), (0.1, 4)), CFG)
        assert sat.non_saturated == 1

    def test_just_below_thresholds_is_not_saturated(self) -> None:
        assert analyze_saturation(reps((0.7999, 4.99)), CFG).non_saturated == 1

    def test_spare_exactly_at_queue_trigger_does_not_scale_up(self) -> None:
        # queue 2 → spare 3 == trigger 3: strict "<" means no scale-up
        sat = analyze_saturation(reps((0.1, 2), (0.1, 2)), CFG)
        assert sat.avg_spare_queue == 3
        assert not sat.scale_up

    def test_spare_just_below_queue_trigger_scales_up(self) -> None:
        sat = analyze_saturation(reps((0.1, 2), (0.1, 3)), CFG)  # avg spare 2.5
        assert sat.scale_up and "queue" in sat.why

    def test_spare_exactly_at_kv_trigger_does_not_scale_up_despite_float_error(self) -> None:
        # 0.9 - 0.8 is 0.09999999999999998 in floats; rounding makes "exactly at" hold
        cfg = SaturationConfig(kv_cache_threshold=0.9, kv_spare_trigger=0.1)
        sat = analyze_saturation(reps((0.8, 0)), cfg)
        assert sat.avg_spare_kv == 0.1
        assert not sat.scale_up

    def test_kv_spare_below_trigger_scales_up(self) -> None:
        sat = analyze_saturation(reps((0.75, 0), (0.71, 0)), CFG)  # spare 0.07 avg
        assert sat.scale_up and sat.why.startswith("kv spare")

    def test_all_saturated_scales_up(self) -> None:
        sat = analyze_saturation(reps((0.9, 0), (0.1, 9)), CFG)
        assert sat.non_saturated == 0 and sat.scale_up and "kv and queue" in sat.why

    def test_both_triggers_zero_never_scale_up(self) -> None:
        cfg = SaturationConfig(kv_spare_trigger=0, queue_spare_trigger=0)
        assert not analyze_saturation(reps((0.9, 9)), cfg).scale_up

    def test_scale_down_needs_two_non_saturated(self) -> None:
        assert not analyze_saturation(reps((0.0, 0)), CFG).scale_down_safe
        assert not analyze_saturation(reps((0.0, 0), (0.95, 0)), CFG).scale_down_safe
        assert analyze_saturation(reps((0.0, 0), (0.0, 0)), CFG).scale_down_safe

    def test_scale_down_simulation_boundary(self) -> None:
        # two replicas at kv 0.35: over one replica kv 0.70 → spare exactly 0.10 ≥ trigger: safe
        assert analyze_saturation(reps((0.35, 0), (0.35, 0)), CFG).scale_down_safe
        # at kv 0.36 each → 0.72 over one → spare 0.08 < 0.10: not safe
        assert not analyze_saturation(reps((0.36, 0), (0.36, 0)), CFG).scale_down_safe
        # queue: 1 each → 2 over one → spare 3 ≥ 3: safe; 1.5 each → 3 over one → spare 2: not safe
        assert analyze_saturation(reps((0.0, 1), (0.0, 1)), CFG).scale_down_safe
        assert not analyze_saturation(reps((0.0, 1), (0.0, 2)), CFG).scale_down_safe


class TestDecide:
    def test_scale_up_goes_to_cheapest_by_one(self) -> None:
        d = by_name(decide([variant("h100", 50, (0.9, 9)), variant("a100", 30, (0.9, 9), (0.9, 9))], CFG))
        assert (d["a100"].current, d["a100"].target, d["a100"].reason) == (2, 3, Reason.SATURATED)
        assert (d["h100"].target, d["h100"].reason) == (1, Reason.STEADY)
        assert "a100" in d["h100"].message

    def test_cost_tie_breaks_by_name_ascending_up_descending_down(self) -> None:
        up = by_name(decide([variant("b", 10, (0.9, 9)), variant("a", 10, (0.9, 9))], CFG))
        assert (up["a"].target, up["b"].target) == (2, 1)
        down = by_name(decide([variant("b", 10, (0, 0), (0, 0)), variant("a", 10, (0, 0), (0, 0))], CFG))
        assert (down["a"].target, down["b"].target) == (2, 1)

    def test_scale_down_from_most_expensive_with_more_than_one(self) -> None:
        d = by_name(
            decide(
                [
                    variant("cheap", 10, (0, 0), (0, 0)),
                    variant("mid", 30, (0, 0), (0, 0)),
                    variant("pricey", 50, (0, 0)),  # most expensive but only one replica
                ],
                CFG,
            )
        )
        assert (d["mid"].target, d["mid"].reason) == (1, Reason.SCALE_DOWN)
        assert d["cheap"].target == 2 and d["pricey"].target == 1

    def test_one_replica_per_group_per_cycle(self) -> None:
        decisions = decide([variant(n, 10 + i, (0.95, 9), (0.95, 9)) for i, n in enumerate("abcd")], CFG)
        assert sum(d.target - d.current for d in decisions) == 1

    def test_pending_blocks_scale_up_of_that_variant_only(self) -> None:
        d = by_name(
            decide(
                [
                    variant("a100", 30, (0.9, 9), current=3, pending=1, blocking_pending=1, oldest_pending_age=40),
                    variant("h100", 50, (0.9, 9)),
                ],
                CFG,
            )
        )
        assert (d["a100"].target, d["a100"].reason) == (3, Reason.PENDING)
        assert "1 replica(s) not Ready" in d["a100"].message
        assert (d["h100"].target, d["h100"].reason) == (2, Reason.SATURATED)

    def test_all_pending_means_no_scale_up(self) -> None:
        decisions = decide([variant("a", 10, (0.9, 9), current=2, pending=1, blocking_pending=1)], CFG)
        assert [(d.target, d.reason) for d in decisions] == [(2, Reason.PENDING)]

    def test_pending_does_not_block_scale_down(self) -> None:
        d = by_name(decide([variant("a", 10, (0, 0), (0, 0), current=3, pending=1, blocking_pending=1)], CFG))
        assert (d["a"].target, d["a"].reason) == (2, Reason.SCALE_DOWN)

    def test_timed_out_pending_no_longer_blocks_and_says_so(self) -> None:
        decisions = decide(
            [variant("a", 10, (0.9, 9), current=2, pending=1, blocking_pending=0, oldest_pending_age=700)], CFG
        )
        [d] = decisions
        assert (d.target, d.reason) == (3, Reason.TIMEOUT)
        assert "700s" in d.message and "pending timeout" in d.message

    def test_cooldown_holds_previous_target_and_excludes_variant(self) -> None:
        d = by_name(decide([variant("a", 10, (0.9, 9), current=2, held_at=3), variant("b", 20, (0.9, 9))], CFG))
        assert (d["a"].target, d["a"].reason) == (3, Reason.COOLDOWN)
        assert (d["b"].target, d["b"].reason) == (2, Reason.SATURATED)

    def test_max_replicas_blocks_scale_up_and_next_variant_gets_it(self) -> None:
        d = by_name(decide([variant("a", 10, (0.9, 9), max_replicas=1), variant("b", 20, (0.9, 9))], CFG))
        assert (d["a"].target, d["a"].reason) == (1, Reason.LIMIT)
        assert d["b"].target == 2

    def test_above_max_is_clamped_and_takes_the_cycle(self) -> None:
        d = by_name(
            decide([variant("a", 10, (0.9, 9), (0.9, 9), (0.9, 9), max_replicas=2), variant("b", 20, (0.9, 9))], CFG)
        )
        assert (d["a"].target, d["a"].reason) == (2, Reason.LIMIT)
        assert d["b"].target == 1  # no saturation move in the same cycle

    def test_below_min_is_raised(self) -> None:
        [d] = decide([variant("a", 10, (0, 0), min_replicas=3)], CFG)
        assert (d.target, d.reason) == (3, Reason.LIMIT)

    def test_min_replicas_floor_for_scale_down(self) -> None:
        [d] = decide([variant("a", 10, (0, 0), (0, 0), min_replicas=2)], CFG)
        assert (d.target, d.reason) == (2, Reason.LIMIT)

    def test_scale_down_never_below_one_without_scale_to_zero(self) -> None:
        [d] = decide([variant("a", 10, (0, 0), min_replicas=0)], CFG)
        assert d.target == 1

    def test_idle_scales_to_min_replicas(self) -> None:
        d = by_name(
            decide(
                [variant("a", 10, (0, 0), (0, 0), min_replicas=0), variant("b", 20, (0, 0))], CFG, idle="no requests"
            )
        )
        assert (d["a"].target, d["a"].reason) == (0, Reason.IDLE)
        assert (d["b"].target, d["b"].reason) == (1, Reason.IDLE)  # minReplicas 1 keeps one

    def test_no_metrics_keeps_current(self) -> None:
        [d] = decide([variant("a", 10, current=2)], CFG)
        assert (d.target, d.reason) == (2, Reason.NO_METRICS)

    def test_steady_when_nothing_fires(self) -> None:
        [d] = decide([variant("a", 10, (0.4, 1), (0.4, 1))], CFG)
        assert (d.target, d.reason) == (2, Reason.STEADY)
        assert "avg spare kv 0.400" in d.message

    @pytest.mark.parametrize(("reason", "text"), [(Reason.TIMEOUT, "Timeout"), (Reason.NO_METRICS, "NoMetrics")])
    def test_condition_reason_camel_case(self, reason: Reason, text: str) -> None:
        assert reason.condition_reason == text
