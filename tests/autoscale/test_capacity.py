"""The V2 saturation analyzer: per-replica token capacity (k1, k2's chain), demand, DP instances,
stored capacity, the picker's queue as demand, and the universal threshold post-step."""

from __future__ import annotations

import pytest

from epp.autoscale.capacity import CapacityAnalyzer, VariantState
from epp.autoscale.engine_args import EngineParams
from epp.autoscale.inputs import ModelSignals
from epp.autoscale.results import calibrate
from epp.autoscale.saturation_config import SaturationConfig
from epp.autoscale.types import ModelKey, ReplicaMetrics

MODEL = ModelKey("ns", "llama")
CFG = SaturationConfig()  # kv 0.8, queue 5, up 0.85, down 0.70
CAP = 10_000


def r(
    pod: str,
    kv: float,
    queue: float = 0,
    *,
    capacity: int = CAP,
    avg_in: float = 0,
    avg_out: float = 0,
    instance: str = "",
) -> ReplicaMetrics:
    return ReplicaMetrics(
        pod, kv, queue, instance=instance, tokens_capacity=capacity, avg_input_tokens=avg_in, avg_output_tokens=avg_out
    )


def variant(name: str, *replicas: ReplicaMetrics, **kw: object) -> VariantState:
    current = kw.pop("current", len({x.pod for x in replicas}))
    return VariantState(name, current=current, replicas=replicas, **kw)  # type: ignore[arg-type]


def test_k1_is_the_kv_threshold_and_demand_the_tokens_in_use() -> None:
    result = CapacityAnalyzer().analyze(MODEL, [variant("a", r("p0", 0.5), r("p1", 0.3))], CFG)
    [vc] = result.variants
    assert (vc.per_replica, vc.replica_count, vc.demand) == (8_000, 2, 8_000)  # k1 = 0.8 × 10k; 5k + 3k in use
    assert (result.supply, result.demand) == (16_000, 8_000)


def test_k2_observed_when_the_queue_is_full_then_remembered() -> None:
    analyzer = CapacityAnalyzer()
    # queue at the threshold: the tokens in use are what the replica sustains (k2 < k1 here)
    first = analyzer.analyze(MODEL, [variant("a", r("p0", 0.6, 5))], CFG)
    assert first.variants[0].per_replica == 6_000
    # later, queue empty: the remembered k2 still bounds capacity
    later = analyzer.analyze(MODEL, [variant("a", r("p0", 0.1))], CFG)
    assert later.variants[0].per_replica == 6_000


def test_k2_from_the_engine_arguments_when_nothing_was_observed() -> None:
    params = EngineParams(max_batched_tokens=1_000, max_num_seqs=8)
    # min(B·O/(I+O), S)·(I+O/2) = min(1000·100/200, 8)·(100+50) = 8·150 = 1200 < k1
    result = CapacityAnalyzer().analyze(
        MODEL, [variant("a", r("p0", 0.1, avg_in=100, avg_out=100), params=params)], CFG
    )
    assert result.variants[0].per_replica == 1_200


def test_waiting_requests_cost_their_footprint_by_role() -> None:
    decode = variant("d", r("p0", 0.1, 2, avg_in=100, avg_out=50), role="decode")
    prefill = variant("p", r("p1", 0.1, 2, avg_in=100, avg_out=50), role="prefill")
    result = CapacityAnalyzer().analyze(MODEL, [decode, prefill], CFG)
    by_name = {v.name: v for v in result.variants}
    assert by_name["d"].demand == 1_000 + 2 * 150  # decode holds prompt and output
    assert by_name["p"].demand == 1_000 + 2 * 100  # prefill holds the prompt only
    assert set(result.roles) == {"decode", "prefill"}


def test_data_parallel_ranks_are_instances_and_pending_pods_convert_to_ranks() -> None:
    ranks = [r("pod0", 0.5, instance=f"pod0:{i}") for i in range(4)]
    v = variant("a", *ranks, current=2, pending=1, coming=1)  # 2 pods: 1 Ready with 4 ranks, 1 loading
    [vc] = CapacityAnalyzer().analyze(MODEL, [v], CFG).variants
    assert (vc.replica_count, vc.pending) == (4, 4)  # the loading pod will bring 4 ranks


def test_a_variant_without_readings_uses_a_capacity_it_can_stand_on() -> None:
    analyzer = CapacityAnalyzer()
    analyzer.analyze(MODEL, [variant("a", r("p0", 0.2))], CFG)
    result = analyzer.analyze(MODEL, [variant("a", current=0), variant("b", current=0)], CFG)
    by_name = {v.name: v for v in result.variants}
    assert (by_name["a"].per_replica, by_name["a"].reason) == (8_000, "stored")  # its own last live capacity
    assert by_name["b"].per_replica == 8_000  # same accelerator, GPUs and arguments as "a"
    fresh = CapacityAnalyzer().analyze(MODEL, [variant("c", current=0)], CFG)
    assert fresh.variants[0].per_replica == 8_192  # the engine's batched-token budget


def test_capacity_without_a_reported_kv_size_comes_from_the_arguments() -> None:
    params = EngineParams(num_gpu_blocks=1_000, block_size=16)  # 16k tokens
    [vc] = CapacityAnalyzer().analyze(MODEL, [variant("a", r("p0", 0.5, capacity=0), params=params)], CFG).variants
    assert (vc.per_replica, vc.demand) == (12_800, 6_400)  # 0.8 × 16k; KV use × that


def test_the_pickers_queue_is_demand_by_role() -> None:
    states = [
        variant("p", r("p0", 0.1, avg_in=200, avg_out=100), role="prefill"),
        variant("d", r("p1", 0.1, avg_in=200, avg_out=100), role="decode"),
    ]
    signals = ModelSignals(queue_size=3, queue_bytes=400)  # max(400/4, 3·200) = 600 prompt tokens, 300 output
    result = CapacityAnalyzer().analyze(MODEL, states, CFG, signals)
    assert result.demand == 2 * 1_000 + 900
    assert result.roles["prefill"].demand == 1_000 + 600 and result.roles["decode"].demand == 1_000 + 900


def test_calibrate_counts_pending_as_supply_on_the_way_up_only() -> None:
    v = variant("a", r("p0", 0.8), r("p1", 0.8), current=3, pending=1, coming=1)
    result = calibrate(CapacityAnalyzer().analyze(MODEL, [v], CFG), 0.85, 0.70)
    assert (result.supply, result.anticipated, result.demand) == (16_000, 24_000, 16_000)
    assert result.required == 0  # 16000/0.85 = 18824 < 24000 with the replica on the way
    assert result.spare == 0  # 16000 − 16000/0.7 < 0: nothing to give back
    idle = calibrate(CapacityAnalyzer().analyze(MODEL, [variant("a", r("p0", 0.1), r("p1", 0.1))], CFG), 0.85, 0.70)
    assert idle.spare == pytest.approx(16_000 - 2_000 / 0.7)
