"""The pool pipeline by endpoint health: who is scheduled, the fallback list, failed responses, fail open."""

from __future__ import annotations

from pool_harness import Harness
from scheduling_builders import NOW, names

from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework import headers
from epp.framework.endpoint import EndpointState, MetricsSnapshot
from epp.framework.health import Health, HealthPolicy
from epp.framework.request import InferenceRequest
from epp.framework.roles import ROLE_LABEL
from epp.framework.staleness import Staleness
from epp.labels import Selector
from epp.requestcontrol.context import RequestContext
from epp.requestcontrol.healthy import healthy_candidates
from epp.requestcontrol.pool_routing import RoutingOptions

BEST = MetricsSnapshot(waiting_queue=0, kv_cache_usage=0.0, updated_at=NOW)
BUSY = MetricsSnapshot(waiting_queue=6, kv_cache_usage=0.7, updated_at=NOW)
FALLBACKS = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: max-score-picker
  parameters: {maxNumOfEndpoints: 3}
"""


class Pool:
    """Three endpoints; pod-0 has the best metrics, so it wins whenever it is a candidate."""

    def __init__(self, config_text: str | None = None, *, staleness: float = 2.0) -> None:
        self.store = Datastore(health=HealthPolicy(consecutive_failures=3, base_ejection=1.0))
        pool = PoolSpec(
            name="pool", namespace="default", selector=Selector.from_match_labels({"a": "b"}), target_ports=(8000,)
        )
        pods = [PodInfo(f"pod-{i}", "default", f"10.0.0.{i}", labels={"a": "b"}, ready=True) for i in range(3)]
        self.store.set_pool(pool, pods)
        for s in self.store.endpoints():
            s.metrics = BEST if s.endpoint.pod_name == "pod-0" else BUSY
        self.harness = Harness(
            self.store, config_text=config_text, options=RoutingOptions(staleness=Staleness(staleness))
        )
        self.clock = self.harness.clock

    def state(self, i: int) -> EndpointState:
        return self.store.endpoints()[i]

    async def route(self) -> RequestContext:
        """A routed request's context (its decision on it)."""
        await self.harness.decide(InferenceRequest(request_id="r", model="m", headers={}))
        assert self.harness.ctx is not None
        return self.harness.ctx

    async def picked(self) -> list[str]:
        decision = (await self.route()).decision
        assert decision is not None
        return names(decision.targets)

    def finished(self, ctx: RequestContext, *, completed: bool, status: int, gateway_reply: bool = False) -> None:
        self.harness.finished(ctx, completed=completed, status=status, gateway_reply=gateway_reply)

    def fail_open(self) -> float:
        get = self.harness.metrics.registry.get_sample_value
        return get("epp_endpoint_health_fail_open_total", {"name": "pool"}) or 0.0


async def test_unreachable_and_ejected_endpoints_are_not_candidates_nor_fallbacks() -> None:
    pool = Pool(FALLBACKS)
    first, *fallbacks = await pool.picked()  # the fallback list, best first
    assert first == "pod-0" and sorted(fallbacks) == ["pod-1", "pod-2"]
    pool.state(0).health.unreachable("refused", pool.clock.now())
    assert sorted(await pool.picked()) == ["pod-1", "pod-2"]
    pool.state(0).health.scrape_ok(pool.clock.now())
    assert (await pool.picked())[0] == "pod-0"
    pool.state(1).health.unreachable("refused", pool.clock.now())
    assert sorted(await pool.picked()) == ["pod-0", "pod-2"]
    assert pool.fail_open() == 0


async def test_failed_responses_eject_the_endpoint_for_its_back_off() -> None:
    pool = Pool()
    for _ in range(3):
        ctx = await pool.route()
        assert ctx.decision is not None and names(ctx.decision.targets) == ["pod-0"]
        pool.finished(ctx, completed=True, status=503)
    assert pool.state(0).health.state is Health.EJECTED
    assert (await pool.picked()) != ["pod-0"]
    pool.clock.advance(1.01)
    assert (await pool.picked()) != ["pod-0"]  # the back-off is over, but it is not preferred until proven good
    pool.state(0).health.scrape_ok(pool.clock.now())
    assert pool.state(0).health.state is Health.HEALTHY and (await pool.picked()) == ["pod-0"]


async def test_envoys_own_503_makes_it_unreachable_at_once_the_model_servers_counts_as_one_failure() -> None:
    pool = Pool()
    ctx = await pool.route()
    pool.finished(ctx, completed=True, status=503)
    assert pool.state(0).health.state is Health.HEALTHY and pool.state(0).health.failures == 1
    ctx = await pool.route()
    pool.finished(ctx, completed=True, status=503, gateway_reply=True)
    assert pool.state(0).health.state is Health.UNREACHABLE
    assert "Envoy answered 503 itself" in pool.state(0).health.reason


async def test_an_answer_to_a_request_routed_before_the_fall_does_not_bring_the_endpoint_back() -> None:
    pool = Pool()
    served_before = await pool.route()  # answered by pod-0 just before it died; the answer ends late
    pool.state(0).health.unreachable("scrape connect: refused", pool.clock.now())
    pool.finished(served_before, completed=True, status=200)
    assert pool.state(0).health.state is Health.UNREACHABLE
    ctx = await pool.route()  # answered by the next best just before it froze
    assert ctx.decision is not None
    frozen = ctx.decision.targets[0].health
    frozen.scrape_failed("scrape timeout")
    pool.finished(ctx, completed=True, status=200)
    assert frozen.state is Health.SUSPECT
    for s in pool.store.endpoints():
        s.health.unreachable("refused", pool.clock.now())
    ctx = await pool.route()  # fail-open: routed there while out, so its answer counts
    assert ctx.decision is not None
    pool.finished(ctx, completed=True, status=200)
    assert ctx.decision.targets[0].health.state is Health.HEALTHY


async def test_a_success_between_failures_and_4xx_keep_it_in_service() -> None:
    pool = Pool()
    for status in (500, 500, 200, 500, 404, 429, 500, 500):
        ctx = await pool.route()
        pool.finished(ctx, completed=True, status=status)
    assert pool.state(0).health.state is Health.HEALTHY
    ctx = await pool.route()
    pool.finished(ctx, completed=False, status=0)  # no response at all: not counted
    assert pool.state(0).health.failures == 2


async def test_stale_and_suspect_endpoints_are_never_preferred_but_used_when_alone() -> None:
    pool = Pool(staleness=2.0)
    pool.clock.advance(3.0)
    for s in pool.store.endpoints()[1:]:
        s.metrics = MetricsSnapshot(waiting_queue=6, kv_cache_usage=0.7, updated_at=pool.clock.now())
    assert (await pool.picked()) != ["pod-0"]  # best metrics, but 3 s old
    for s in pool.store.endpoints()[1:]:
        s.health.scrape_failed("scrape timeout")
    pool.state(0).metrics = MetricsSnapshot(updated_at=pool.clock.now())
    pool.state(0).health.scrape_failed("scrape timeout")
    assert (await pool.picked()) == ["pod-0"]  # all suspect: scheduled among themselves on their metrics
    assert pool.fail_open() == 0


async def test_when_no_endpoint_is_routable_every_one_is_a_candidate_and_it_is_counted() -> None:
    pool = Pool()
    for s in pool.store.endpoints():
        s.health.unreachable("refused", pool.clock.now())
    assert (await pool.picked()) == ["pod-0"]
    assert pool.fail_open() == 1


def test_all_in_service_returns_the_candidates_untouched() -> None:
    pool = Pool()
    endpoints = pool.store.endpoints()
    assert healthy_candidates(endpoints, NOW, Staleness(2.0)) == (endpoints, False)
    assert healthy_candidates((), NOW, Staleness(2.0)) == ((), False)


PD = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: queue-scorer
- type: max-score-picker
- type: always-disagg-pd-decider
- type: disagg-profile-handler
  parameters: {deciders: {prefill: always-disagg-pd-decider}}
schedulingProfiles:
- name: prefill
  plugins: [{pluginRef: prefill-filter}, {pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
- name: decode
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}, {pluginRef: max-score-picker}]
"""


def _pd_pool() -> tuple[Datastore, Harness]:
    """pod-0 prefill, pod-1 and pod-2 decode."""
    store = Datastore(health=HealthPolicy(consecutive_failures=3, base_ejection=1.0))
    pool = PoolSpec(
        name="pool", namespace="default", selector=Selector.from_match_labels({"a": "b"}), target_ports=(8000,)
    )
    roles = ["prefill", "decode", "decode"]
    pods = [
        PodInfo(f"pod-{i}", "default", f"10.0.0.{i}", labels={"a": "b", ROLE_LABEL: role}, ready=True)
        for i, role in enumerate(roles)
    ]
    store.set_pool(pool, pods)
    for s in store.endpoints():
        s.metrics = BEST
    return store, Harness(store, config_text=PD)


async def test_a_stage_whose_pods_are_all_suspect_keeps_them_while_the_other_stage_is_in_service() -> None:
    store, harness = _pd_pool()
    prefill, decode_a, decode_b = store.endpoints()
    decode_a.health.scrape_failed("scrape timeout")
    decode_b.health.scrape_failed("scrape timeout")  # e.g. their sidecars slow to pass /metrics on
    candidates, failed_open = healthy_candidates(store.endpoints(), NOW, Staleness(2.0))
    assert list(candidates) == [prefill, decode_a, decode_b] and not failed_open
    decision = await harness.decide(InferenceRequest(request_id="r", model="m", headers={}))
    assert names(decision.targets) in (["pod-1"], ["pod-2"])  # decoded on a suspect decode pod, not refused
    assert decision.upstream_headers[headers.PREFILLER_HOST_PORT] == "10.0.0.0:8000"
    decode_a.health.scrape_ok(NOW)
    candidates, _ = healthy_candidates(store.endpoints(), NOW, Staleness(2.0))
    assert list(candidates) == [prefill, decode_a]  # within a stage, the suspect pod is still never preferred


async def test_each_stage_fails_open_on_its_own() -> None:
    store, harness = _pd_pool()
    prefill, decode_a, decode_b = store.endpoints()
    prefill.health.unreachable("refused", NOW)
    candidates, failed_open = healthy_candidates(store.endpoints(), NOW, Staleness(2.0))
    assert list(candidates) == [prefill, decode_a, decode_b] and failed_open
