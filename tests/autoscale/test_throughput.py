"""The throughput analyzer: the ITL model (tier 1 OLS, tier 2 pinned B), decode supply at k_sat,
model demand from arrivals and the picker's queue, shape changes, roles, and scale-from-zero memory."""

from __future__ import annotations

import pytest

from epp.autoscale.capacity import VariantState
from epp.autoscale.inputs import ModelSignals
from epp.autoscale.throughput import BASELINE_ITL, K_SAT, ThroughputAnalyzer, fit_itl
from epp.autoscale.types import ModelKey, ReplicaMetrics

MODEL = ModelKey("ns", "llama")
A, B = 0.02, 0.005  # ITL(k) = 0.02 k + 0.005 s


def reading(pod: str, k: float, *, avg_in: float = 400, avg_out: float = 200, capacity: int = 10_000) -> ReplicaMetrics:
    return ReplicaMetrics(
        pod, k, 0, tokens_capacity=capacity, avg_input_tokens=avg_in, avg_output_tokens=avg_out, avg_itl=A * k + B
    )


def test_fit_itl_recovers_a_line_and_rejects_nonsense() -> None:
    a, b = fit_itl([(k, A * k + B) for k in (0.2, 0.4, 0.6)]) or (0, 0)
    assert (a, b) == (pytest.approx(A), pytest.approx(B))
    assert fit_itl([(0.5, 0.01)]) is None  # one point
    assert fit_itl([(0.2, 0.02), (0.6, 0.01)]) is None  # latency falling with load: not a model


def test_tier_two_pins_b_until_the_window_can_fit() -> None:
    analyzer = ThroughputAnalyzer()
    state = VariantState("a", current=1, replicas=(reading("p0", 0.5),))
    [vc] = analyzer.analyze(MODEL, [state], ModelSignals(), now=0).variants
    assert vc.reason == "T2-default"
    a = (A * 0.5 + B - BASELINE_ITL) / 0.5  # A fitted with B = 6 ms
    kv_req = 400 + 200 / 2
    assert vc.per_replica == pytest.approx(K_SAT * 10_000 / kv_req / (a * K_SAT + BASELINE_ITL))
    # ten observations spanning k 0.2..0.8: the OLS fit takes over
    for i, k in enumerate((0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.25, 0.35, 0.45)):
        result = analyzer.analyze(MODEL, [VariantState("a", current=1, replicas=(reading("p0", k),))], None, now=i + 1)
    [vc] = result.variants
    assert vc.reason == "T1-ols"
    assert vc.per_replica == pytest.approx(K_SAT * 10_000 / kv_req / (A * K_SAT + B))


def test_demand_is_arrivals_times_output_plus_the_queue_drained() -> None:
    analyzer = ThroughputAnalyzer()
    states = [VariantState("a", current=2, replicas=(reading("p0", 0.5), reading("p1", 0.5)))]
    result = analyzer.analyze(MODEL, states, ModelSignals(arrival_rate=3, queue_size=4), now=0)
    a = (A * 0.5 + B - BASELINE_ITL) / 0.5
    itl_sat = a * K_SAT + BASELINE_ITL
    assert result.demand == pytest.approx(3 * 200 + 4 / (2 * itl_sat))
    assert result.supply == pytest.approx(2 * result.variants[0].per_replica)
    assert analyzer.analyze(MODEL, states, None, now=1).demand == 0  # no picker signals: no demand


def test_a_shape_change_restarts_calibration() -> None:
    analyzer = ThroughputAnalyzer()
    for i, k in enumerate((0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.25, 0.35, 0.45)):
        analyzer.analyze(MODEL, [VariantState("a", current=1, replicas=(reading("p0", k),))], None, now=i)
    longer = reading("p0", 0.5, avg_out=600)  # outputs three times longer
    [vc] = analyzer.analyze(MODEL, [VariantState("a", current=1, replicas=(longer,))], None, now=20).variants
    assert vc.reason == "T2-pinned"  # window cleared; B kept from the last fit


def test_prefill_takes_no_decode_demand_and_a_variant_at_zero_keeps_its_supply() -> None:
    analyzer = ThroughputAnalyzer()
    states = [
        VariantState("pre", role="prefill", current=1, replicas=(reading("p0", 0.5),)),
        VariantState("dec", role="decode", current=1, replicas=(reading("p1", 0.5),)),
    ]
    result = analyzer.analyze(MODEL, states, ModelSignals(arrival_rate=2), now=0)
    assert result.roles["prefill"].demand == 0 and result.roles["decode"].demand == pytest.approx(2 * 200)
    later = analyzer.analyze(MODEL, [VariantState("dec", role="decode", current=0)], None, now=1)
    [vc] = later.variants
    assert (vc.reason, vc.replica_count, vc.per_replica > 0) == ("T-sfz", 0, True)


def test_unhealthy_readings_give_no_model() -> None:
    no_itl = ReplicaMetrics("p0", 0.5, 0, tokens_capacity=10_000, avg_input_tokens=400, avg_output_tokens=200)
    result = ThroughputAnalyzer().analyze(MODEL, [VariantState("a", current=1, replicas=(no_itl,))], None, now=0)
    assert result.variants == () and result.supply == 0
