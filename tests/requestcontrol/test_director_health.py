"""The director by endpoint health: who is scheduled, the fallback list, failed responses, fail open."""

from __future__ import annotations

import random

from scheduling_builders import NOW, names

from epp.clock import ManualClock
from epp.config.loader import load_config, load_default_config
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework.endpoint import EndpointState, MetricsSnapshot
from epp.framework.health import Health, HealthPolicy
from epp.framework.plugin import PluginContext, PluginRegistry
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.labels import Selector
from epp.plugins import register_in_tree
from epp.requestcontrol.director import PoolDirector
from epp.requestcontrol.healthy import healthy_candidates
from epp.telemetry.metrics import EppMetrics

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
        self.clock = ManualClock(start=NOW)
        self.metrics = EppMetrics()
        registry = PluginRegistry()
        register_in_tree(registry)
        context = PluginContext(clock=self.clock, seed=7)
        config = (
            load_default_config(registry, context, metrics=self.metrics)
            if config_text is None
            else load_config(config_text, registry, context, metrics=self.metrics)
        )
        self.director = PoolDirector(
            self.store,
            lambda: config,
            self.metrics,
            self.clock,
            random.Random(3),
            staleness_threshold=staleness,
            pool_name="pool",
        )

    def state(self, i: int) -> EndpointState:
        return self.store.endpoints()[i]

    def route(self) -> tuple[InferenceRequest, RoutingDecision]:
        request = InferenceRequest(request_id="r", model="m", headers={})
        return request, self.director.route(request, None)

    def picked(self) -> list[str]:
        return names(self.route()[1].targets)

    def fail_open(self) -> float:
        return self.metrics.registry.get_sample_value("epp_endpoint_health_fail_open_total", {"name": "pool"}) or 0.0


def test_unreachable_and_ejected_endpoints_are_not_candidates_nor_fallbacks() -> None:
    pool = Pool(FALLBACKS)
    first, *fallbacks = pool.picked()  # the fallback list, best first
    assert first == "pod-0" and sorted(fallbacks) == ["pod-1", "pod-2"]
    pool.state(0).health.unreachable("refused", pool.clock.now())
    assert sorted(pool.picked()) == ["pod-1", "pod-2"]
    pool.state(0).health.scrape_ok(pool.clock.now())
    assert pool.picked()[0] == "pod-0"
    pool.state(1).health.unreachable("refused", pool.clock.now())
    assert sorted(pool.picked()) == ["pod-0", "pod-2"]
    assert pool.fail_open() == 0


def test_failed_responses_eject_the_endpoint_for_its_back_off() -> None:
    pool = Pool()
    for _ in range(3):
        request, decision = pool.route()
        assert names(decision.targets) == ["pod-0"]
        pool.director.finished(request, decision, completed=True, status=503)
    assert pool.state(0).health.state is Health.EJECTED
    assert pool.picked() != ["pod-0"]
    pool.clock.advance(1.01)
    assert pool.picked() != ["pod-0"]  # the back-off is over, but it is not preferred until proven good
    pool.state(0).health.scrape_ok(pool.clock.now())
    assert pool.state(0).health.state is Health.HEALTHY and pool.picked() == ["pod-0"]


def test_envoys_own_503_makes_it_unreachable_at_once_the_model_servers_counts_as_one_failure() -> None:
    pool = Pool()
    request, decision = pool.route()
    pool.director.finished(request, decision, completed=True, status=503)
    assert pool.state(0).health.state is Health.HEALTHY and pool.state(0).health.failures == 1
    request, decision = pool.route()
    pool.director.finished(request, decision, completed=True, status=503, gateway_reply=True)
    assert pool.state(0).health.state is Health.UNREACHABLE
    assert "Envoy answered 503 itself" in pool.state(0).health.reason


def test_a_success_between_failures_and_4xx_keep_it_in_service() -> None:
    pool = Pool()
    for status in (500, 500, 200, 500, 404, 429, 500, 500):
        request, decision = pool.route()
        pool.director.finished(request, decision, completed=True, status=status)
    assert pool.state(0).health.state is Health.HEALTHY
    request, decision = pool.route()
    pool.director.finished(request, decision, completed=False, status=0)  # no response at all: not counted
    assert pool.state(0).health.failures == 2


def test_stale_and_suspect_endpoints_are_never_preferred_but_used_when_alone() -> None:
    pool = Pool(staleness=2.0)
    pool.clock.advance(3.0)
    for s in pool.store.endpoints()[1:]:
        s.metrics = MetricsSnapshot(waiting_queue=6, kv_cache_usage=0.7, updated_at=pool.clock.now())
    assert pool.picked() != ["pod-0"]  # best metrics, but 3 s old
    for s in pool.store.endpoints()[1:]:
        s.health.scrape_failed("scrape timeout")
    pool.state(0).metrics = MetricsSnapshot(updated_at=pool.clock.now())
    pool.state(0).health.scrape_failed("scrape timeout")
    assert pool.picked() == ["pod-0"]  # all suspect: scheduled among themselves on their metrics
    assert pool.fail_open() == 0


def test_when_no_endpoint_is_routable_every_one_is_a_candidate_and_it_is_counted() -> None:
    pool = Pool()
    for s in pool.store.endpoints():
        s.health.unreachable("refused", pool.clock.now())
    assert pool.picked() == ["pod-0"]
    assert pool.fail_open() == 1


def test_all_in_service_returns_the_candidates_untouched() -> None:
    pool = Pool()
    endpoints = pool.store.endpoints()
    assert healthy_candidates(endpoints, NOW, 2.0) == (endpoints, False)
    assert healthy_candidates((), NOW, 2.0) == ((), False)
