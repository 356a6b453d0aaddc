"""The quota limiter: cluster and namespace scope, upstream's lookup rules, order, whole replicas."""

from __future__ import annotations

from epp.autoscale.quota import Proposal, QuotaLimiter, apply_limiters

CLUSTER = QuotaLimiter("cluster-h100", "cluster", quotas={"H100": 8, "L40S": -1})
TEAMS = QuotaLimiter(
    "teams",
    "namespace",
    namespace_quotas={"team-a": {"H100": 4}, "unlimited": {"H100": -1}, "default": {"H100": 2}},
    exclude=("system",),
)


def up(ns: str, name: str, current: int, target: int, *, acc: str = "H100", gpus: int = 1, **kw: float) -> Proposal:
    return Proposal(ns, name, acc, gpus, current, target, **kw)  # type: ignore[arg-type]


def test_cluster_cap_counts_what_runs_and_grants_whole_replicas() -> None:
    running = up("a", "running", 4, 4, gpus=1)
    growing = up("b", "growing", 1, 5, gpus=2)  # 2 GPUs each: 4 + 2 in use, 2 left → one replica
    limited = apply_limiters([CLUSTER], [running, growing])
    assert [p.name for p in limited] == ["growing"]
    assert (growing.target, growing.limited_by) == (2, "cluster-h100")
    free = up("c", "free", 1, 9, acc="L40S")  # unlimited type
    assert apply_limiters([CLUSTER], [free]) == [] and free.target == 9


def test_a_type_without_a_quota_is_denied_and_an_unresolved_one_fails_closed() -> None:
    a100 = up("a", "x", 1, 3, acc="A100")
    unknown = up("a", "y", 1, 3, acc="unknown")
    two_types = QuotaLimiter("two", "cluster", quotas={"H100": 8, "A100": 8})
    apply_limiters([two_types], [unknown])
    assert unknown.target == 1  # two types known: cannot tell which
    apply_limiters([CLUSTER], [a100])
    assert a100.target == 1
    single = up("a", "z", 1, 3, acc="")
    apply_limiters([QuotaLimiter("only", "cluster", quotas={"H100": 8})], [single])
    assert (single.accelerator, single.target) == ("H100", 3)  # one type: it is that one


def test_namespace_scope_lookup_rules() -> None:
    team_a = up("team-a", "a", 3, 6)  # 4 allowed, 3 in use → 1
    elsewhere = up("team-b", "b", 0, 5)  # unlisted: its own copy of the default's 2
    other = up("team-c", "c", 0, 5)  # another unlisted namespace: another 2, not shared
    unlimited = up("unlimited", "u", 0, 50)
    excluded = up("system", "s", 0, 50)
    apply_limiters([TEAMS], [team_a, elsewhere, other, unlimited, excluded])
    assert [p.target for p in (team_a, elsewhere, other, unlimited, excluded)] == [4, 2, 2, 50, 50]
    listed_other_type = up("team-a", "l40", 0, 2, acc="L40S")
    apply_limiters([TEAMS], [listed_other_type])
    assert listed_other_type.target == 0  # a listed namespace is a closed list of types


def test_order_priority_then_least_spare_then_cheapest_and_limiters_compose() -> None:
    low = up("a", "low", 0, 4, priority=1.0, spare=0.0)
    high = up("b", "high", 0, 4, priority=2.0, spare=5.0)
    cramped = up("c", "cramped", 0, 4, priority=1.0, spare=0.0, cost=5.0)
    apply_limiters([QuotaLimiter("q", "cluster", quotas={"H100": 6})], [low, high, cramped])
    assert (high.target, cramped.target, low.target) == (4, 2, 0)  # priority first; then the cheaper
    both = up("team-a", "x", 0, 10)
    apply_limiters([CLUSTER, TEAMS], [both])
    assert (both.target, both.limited_by) == (4, "cluster-h100")  # the tighter wins; the first to cut is named


def test_scale_down_and_minimums_are_left_alone() -> None:
    down = up("a", "down", 5, 3)
    floor = up("team-x", "floor", 0, 5, min_replicas=1)
    apply_limiters([QuotaLimiter("none", "cluster", quotas={})], [down, floor])
    assert (down.target, floor.target) == (3, 1)
