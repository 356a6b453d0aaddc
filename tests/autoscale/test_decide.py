"""One group's decisions: V2's reasons (saturated, pending, timeout, scale-down, vetoed, limit, no
metrics), the pending timeout as a guard, V1 per P/D role, and the enforcer (idle, one replica)."""

from __future__ import annotations

from dataclasses import replace

from epp.autoscale.decide import GroupDecider, Member
from epp.autoscale.decision import Reason
from epp.autoscale.inputs import ModelSignals
from epp.autoscale.pending import PendingState
from epp.autoscale.saturation_config import AnalyzerSpec, SaturationConfig
from epp.autoscale.scaletargets import ScaleTargetView
from epp.autoscale.types import ModelKey, ReplicaMetrics, VariantKey
from epp.autoscale.variants import Source, VariantSpec

MODEL = ModelKey("ns", "llama")
V2 = SaturationConfig()
V1 = SaturationConfig(analyzers=())
CAP = 10_000  # tokens per replica; k1 = 8000


def member(
    name: str,
    *kv: float,
    current: int | None = None,
    pending: PendingState | None = None,
    cost: float = 10,
    role: str = "both",
    low: int = 1,
    high: int | None = None,
    queue: float = 0,
) -> Member:
    replicas = tuple(ReplicaMetrics(f"{name}-{i}", k, queue, tokens_capacity=CAP) for i, k in enumerate(kv))
    spec = VariantSpec(VariantKey("ns", name), Source.HPA, "llama", "Deployment", name, cost, low, high)
    target = ScaleTargetView("Deployment", "ns", name, role=role)
    n = len(kv) if current is None else current
    return Member(spec, target, "A100", n, pending or PendingState(), replicas=replicas)


def outcome(decisions: list, name: str) -> tuple[int, int, Reason]:  # type: ignore[type-arg]
    d = next(d for d in decisions if d.variant.name == name)
    return d.current, d.target, d.reason


def test_v2_saturated_then_pending_covers_it_then_timeout_lets_it_grow() -> None:
    decider = GroupDecider(interval=15)
    hot = member("a", 0.9, 0.9)  # demand 18000 > 16000 · 0.85
    [d] = decider.decide(MODEL, [hot], V2, now=0)
    assert (d.current, d.target, d.reason) == (2, 3, Reason.SATURATED)
    assert d.signals is not None and d.signals.unit == "continuous" and d.signals.required > 0
    # the third replica is loading: counted as supply on the way, so nothing more is asked for
    loading = member("a", 0.9, 0.9, current=3, pending=PendingState(pending=1, blocking=1, oldest_age=40))
    [d] = decider.decide(MODEL, [loading], V2, now=15)
    assert (d.current, d.target, d.reason) == (3, 3, Reason.PENDING)
    assert "1 replica(s) not Ready yet (oldest 40s)" in d.message
    # past --pending-timeout it no longer counts as supply: scale-up resumes, and says why
    stuck = member("a", 0.9, 0.9, current=3, pending=PendingState(pending=1, blocking=0, oldest_age=700))
    [d] = decider.decide(MODEL, [stuck], V2, now=30)
    assert (d.current, d.target, d.reason) == (3, 4, Reason.TIMEOUT)
    assert "past the pending timeout" in d.message


def test_v2_scale_down_steady_and_limits() -> None:
    decider = GroupDecider(interval=15)
    assert outcome(decider.decide(MODEL, [member("a", 0.1, 0.1, 0.1)], V2, now=0), "a") == (3, 1, Reason.SCALE_DOWN)
    assert outcome(decider.decide(MODEL, [member("a", 0.5, 0.5)], V2, now=1), "a") == (2, 2, Reason.STEADY)
    at_max = decider.decide(MODEL, [member("a", 0.95, 0.95, high=2)], V2, now=2)
    assert outcome(at_max, "a") == (2, 2, Reason.LIMIT)
    above = decider.decide(MODEL, [member("a", 0.5, 0.5, 0.5, high=2)], V2, now=3)
    assert outcome(above, "a") == (3, 2, Reason.LIMIT)
    below = decider.decide(MODEL, [member("a", 0.1, low=3)], V2, now=4)
    assert outcome(below, "a") == (1, 3, Reason.LIMIT)


def test_v2_with_no_metrics_holds_and_the_model_keeps_one_replica() -> None:
    decider = GroupDecider(interval=15)
    [d] = decider.decide(MODEL, [member("a", current=2)], V2, now=0)
    assert (d.current, d.target, d.reason) == (2, 2, Reason.NO_METRICS)
    # every variant allowed to reach 0, the load gone, scale-to-zero off: the cheapest keeps one
    idle = [member("cheap", 0.0, low=0, cost=1), member("dear", 0.0, low=0, cost=5)]
    decisions = decider.decide(MODEL, idle, V2, now=1)
    assert outcome(decisions, "cheap") == (1, 1, Reason.STEADY)
    assert outcome(decisions, "dear") == (1, 0, Reason.SCALE_DOWN)


def test_v2_scale_down_needs_the_live_throughput_analyzer_to_agree() -> None:
    cfg = replace(V2, analyzers=(AnalyzerSpec("saturation"), AnalyzerSpec("throughput")))
    decider = GroupDecider(interval=15)
    shaped = [
        replace(r, avg_itl=0.01, avg_input_tokens=100, avg_output_tokens=100) for r in member("a", 0.1, 0.1).replicas
    ]
    m = replace(member("a"), current=2, replicas=tuple(shaped))
    # KV nearly empty, but the picker's arrivals (22/s × 100 output tokens = 2200 tokens/s, against
    # 2 × 1417 of decode supply) would not fit on one replica fewer: no spare in throughput's terms
    [d] = decider.decide(MODEL, [m], cfg, now=0, signals=ModelSignals(arrival_rate=22))
    assert (d.current, d.target, d.reason) == (2, 2, Reason.STEADY)
    assert d.message.startswith("scale-down vetoed by throughput;")
    assert [v.name for v in decider.last_votes[MODEL]] == ["saturation", "throughput"]
    # no arrivals: throughput has spare too, and both agree
    [d] = decider.decide(MODEL, [m], cfg, now=15, signals=ModelSignals())
    assert (d.current, d.target, d.reason) == (2, 1, Reason.SCALE_DOWN)


def test_v1_runs_per_role() -> None:
    decider = GroupDecider(interval=15)
    prefill = member("pre", 0.9, 0.9, role="prefill")
    decode = member("dec", 0.3, 0.3, role="decode")
    decisions = decider.decide(MODEL, [prefill, decode], V1, now=0)
    assert outcome(decisions, "pre") == (2, 3, Reason.SATURATED)  # its own saturation
    assert outcome(decisions, "dec") == (2, 1, Reason.SCALE_DOWN)  # not averaged with prefill's
    assert all(d.signals is not None and d.signals.unit == "binary" for d in decisions)


def test_idle_sends_every_variant_to_its_minimum() -> None:
    decisions = GroupDecider(15).decide(MODEL, [member("a", 0.0, low=0), member("b", 0.0)], V2, now=0, idle="quiet")
    assert outcome(decisions, "a") == (1, 0, Reason.IDLE) and outcome(decisions, "b") == (1, 1, Reason.IDLE)
