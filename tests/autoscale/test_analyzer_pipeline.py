"""The multi-analyzer pipeline and its cost-aware optimizer: any-up, all-down, the liveness-gated veto,
which analyzer sizes replicas, costs, bounds, and P/D roles scaling on their own needs."""

from __future__ import annotations

from epp.autoscale.capacity import VariantState
from epp.autoscale.pipeline import Liveness, Vote, binding, optimize
from epp.autoscale.results import AnalyzerResult, RoleCapacity, VariantCapacity
from epp.autoscale.types import ModelKey

UNBOUNDED: dict[str, tuple[int, int | None]] = {}


def result(
    analyzer: str, *variants: VariantCapacity, required: float = 0, spare: float = 0, **roles: RoleCapacity
) -> AnalyzerResult:
    return AnalyzerResult(analyzer, variants, required=required, spare=spare, roles=roles)


def vc(name: str, per_replica: float, *, cost: float = 10, count: int = 1, role: str = "both") -> VariantCapacity:
    return VariantCapacity(name, role, cost, "A100", count, 0, per_replica)


def states(**current: int) -> list[VariantState]:
    return [VariantState(name, current=n) for name, n in current.items()]


def bounds(low: int = 1, high: int | None = None, *names: str) -> dict[str, tuple[int, int | None]]:
    return dict.fromkeys(names, (low, high))


def test_scale_up_goes_to_the_cheapest_capacity_and_may_add_several() -> None:
    sat = result("saturation", vc("a100", 100, cost=30), vc("h100", 300, cost=50), required=650)
    plan = optimize([Vote("saturation", sat)], states(a100=1, h100=1), bounds(1, None, "a100", "h100"))
    assert plan.targets == {"a100": 1, "h100": 4}  # 50/300 per unit beats 30/100; ceil(650/300) = 3


def test_scale_up_stops_at_the_maximum_then_moves_on() -> None:
    sat = result("saturation", vc("cheap", 100, cost=1), vc("dear", 100, cost=9), required=350)
    plan = optimize([Vote("saturation", sat)], states(cheap=1, dear=1), {"cheap": (1, 2), "dear": (1, None)})
    assert plan.targets == {"cheap": 2, "dear": 4}


def test_any_analyzer_asking_for_capacity_scales_up() -> None:
    sat = result("saturation", vc("a", 100), spare=500)
    tp = result("throughput", vc("a", 20), required=30)  # its own unit: tokens per second
    plan = optimize([Vote("saturation", sat), Vote("throughput", tp)], states(a=2), bounds(1, None, "a"))
    assert plan.targets == {"a": 4}  # sized by the neediest voter: ceil(30 / 20) = 2 more


def test_scale_down_most_expensive_first_and_the_cheapest_keeps_one() -> None:
    sat = result("saturation", vc("a100", 100, cost=30, count=3), vc("h100", 100, cost=50, count=2), spare=10_000)
    plan = optimize([Vote("saturation", sat)], states(a100=3, h100=2), bounds(0, None, "a100", "h100"))
    assert plan.targets == {"a100": 1, "h100": 0}


def test_scale_down_needs_every_live_analyzer_to_have_spare() -> None:
    sat = result("saturation", vc("a", 100, count=3), spare=250)
    tp = result("throughput", vc("a", 10, count=3))  # live, no spare: vetoes
    plan = optimize([Vote("saturation", sat), Vote("throughput", tp)], states(a=3), bounds(1, None, "a"))
    assert plan.targets == {"a": 3} and plan.vetoed_by == {"both": ["throughput"]}
    # a stale analyzer neither vetoes nor sizes the step (#1481)
    plan = optimize([Vote("saturation", sat), Vote("throughput", tp, live=False)], states(a=3), bounds(1, None, "a"))
    assert plan.targets == {"a": 1}  # floor(250 / 100) = 2 fewer
    # with no live analyzer there is no basis to give anything back
    plan = optimize([Vote("saturation", sat, live=False)], states(a=3), bounds(1, None, "a"))
    assert plan.held and plan.targets == {"a": 3}


def test_the_smallest_spare_in_replicas_decides_how_many_go() -> None:
    sat = result("saturation", vc("a", 100, count=4), spare=350)  # 3 replicas' worth
    tp = result("throughput", vc("a", 10, count=4), spare=12)  # 1 replica's worth
    plan = optimize([Vote("saturation", sat), Vote("throughput", tp)], states(a=4), bounds(1, None, "a"))
    assert plan.targets == {"a": 3}


def test_which_analyzer_binds() -> None:
    sat = Vote("saturation", result("saturation", vc("a", 100)))
    tp = Vote("throughput", result("throughput", vc("a", 10)))
    assert binding([sat, tp]) is sat
    quiet = Vote("saturation", sat.result, enabled=False)  # throughput-only config: saturation carries identity only
    assert binding([quiet, tp]) is tp
    other = Vote("custom", result("custom", vc("a", 5)))
    assert binding([quiet, tp, other]) is None  # two candidates: hold rather than guess
    plan = optimize([quiet, tp, other], states(a=2), bounds(1, None, "a"))
    assert plan.held and plan.targets == {"a": 2}


def test_liveness_lasts_three_cycles() -> None:
    liveness = Liveness(interval=10)
    model = ModelKey("ns", "m")
    informative = Vote("throughput", result("throughput", vc("a", 10)))
    liveness.mark(model, [informative], now=100)
    assert informative.live
    silent = Vote("throughput", result("throughput"))  # no variant with a capacity
    liveness.mark(model, [silent], now=130)
    assert silent.live  # last informative 30 s ago = 3 cycles
    liveness.mark(model, [silent], now=131)
    assert not silent.live
    liveness.retain(set())  # an empty cycle forgets nothing
    liveness.retain({ModelKey("ns", "other")})
    liveness.mark(model, [silent], now=132)
    assert not silent.live


def test_prefill_and_decode_scale_on_their_own_needs() -> None:
    sat = result(
        "saturation",
        vc("pre", 100, role="prefill"),
        vc("dec", 50, role="decode"),
        prefill=RoleCapacity(required=0, spare=0),
        decode=RoleCapacity(required=120, spare=0),
    )
    plan = optimize([Vote("saturation", sat)], states(pre=1, dec=2), bounds(1, None, "pre", "dec"))
    assert plan.targets == {"pre": 1, "dec": 5}  # decode needs 3 more; prefill, with no need, none
    spare = result(
        "saturation",
        vc("pre", 100, role="prefill", count=3),
        vc("dec", 50, role="decode", count=2),
        prefill=RoleCapacity(spare=150),
        decode=RoleCapacity(spare=0),
    )
    plan = optimize([Vote("saturation", spare)], states(pre=3, dec=2), bounds(1, None, "pre", "dec"))
    assert plan.targets == {"pre": 2, "dec": 2} and plan.vetoed_by == {"decode": ["saturation"]}
