"""The pool pipeline: route / route_headers_only / finished over the real Datastore and the default config."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pool_harness import Harness
from scheduling_builders import NOW, names

from epp.config.loader import LoadedConfig, load_config
from epp.datastore.store import Datastore
from epp.datastore.types import (
    ModelSpec,
    ObjectiveSpec,
    PodInfo,
    PoolSpec,
    RewriteRule,
    RewriteSpec,
    TargetModel,
)
from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import EndpointState, MetricsSnapshot
from epp.framework.plugin import PluginContext, PluginKind, PluginRegistry, TypedName
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import CycleState, SchedulingResult
from epp.labels import Selector
from epp.plugins import register_in_tree

V1 = "inference.networking.k8s.io/v1"
V1ALPHA2 = "inference.networking.x-k8s.io/v1alpha2"
SELECTOR = Selector.from_match_labels({"app": "vllm"})


def make_store(n: int, *, api_version: str = V1) -> Datastore:
    store = Datastore()
    pool = PoolSpec(name="pool", namespace="default", selector=SELECTOR, target_ports=(8000,), api_version=api_version)
    pods = [
        PodInfo(name=f"pod-{i}", namespace="default", ip=f"10.0.0.{i}", labels={"app": "vllm"}, ready=True)
        for i in range(n)
    ]
    store.set_pool(pool, pods)
    for s in store.endpoints():
        s.metrics = MetricsSnapshot(updated_at=NOW)
    return store


def set_metrics(store: Datastore, **per_pod: MetricsSnapshot) -> None:
    for s in store.endpoints():
        if s.endpoint.pod_name.replace("-", "_") in per_pod:
            s.metrics = per_pod[s.endpoint.pod_name.replace("-", "_")]


async def test_route_picks_by_default_profile() -> None:
    store = make_store(3)
    set_metrics(
        store,
        pod_0=MetricsSnapshot(waiting_queue=3, kv_cache_usage=0.2, updated_at=NOW),
        pod_1=MetricsSnapshot(waiting_queue=0, kv_cache_usage=0.1, updated_at=NOW),
        pod_2=MetricsSnapshot(waiting_queue=10, kv_cache_usage=0.2, updated_at=NOW),
    )
    h = Harness(store)
    req = await h.route("llama")
    assert names(h.last.targets) == ["pod-1"]
    assert h.last.destination == "10.0.0.1:8000"
    assert (req.target_model, req.priority) == ("llama", 0)


async def test_header_sets_target_model() -> None:
    h = Harness(make_store(2))
    req = await h.route("llama", x_gateway_model_name_rewrite="llama-ft")
    assert (req.model, req.target_model) == ("llama", "llama-ft")


def rewrite(name: str, created: float, *rules: RewriteRule) -> RewriteSpec:
    return RewriteSpec(name=name, namespace="default", rules=rules, created=created)


def rule(*targets: str | tuple[str, int], matches: Sequence[str] = ()) -> RewriteRule:
    return RewriteRule(
        matches=tuple(matches),
        targets=tuple(TargetModel(t) if isinstance(t, str) else TargetModel(t[0], t[1]) for t in targets),
    )


async def test_rewrite_precedence_oldest_exact_then_oldest_generic() -> None:
    store = make_store(2)
    store.set_rewrite(rewrite("generic-old", 10, rule("generic-a")))
    store.set_rewrite(rewrite("exact-new", 20, rule("food-new", matches=["food"])))
    store.set_rewrite(rewrite("exact-old", 15, rule("food-old", matches=["food", "drink"])))
    store.set_rewrite(rewrite("generic-new", 30, rule("generic-b")))
    h = Harness(store)
    assert (await h.route("food", x_gateway_model_name_rewrite="ignored")).target_model == "food-old"
    assert (await h.route("drink")).target_model == "food-old"
    assert (await h.route("other")).target_model == "generic-a"
    decisions = h.metrics.registry.get_sample_value
    name = "inference_extension_model_rewrite_decisions_total"
    assert decisions(name, {"model_rewrite_name": "exact-old", "model_name": "food", "target_model": "food-old"}) == 1
    assert (
        decisions(name, {"model_rewrite_name": "generic-old", "model_name": "other", "target_model": "generic-a"}) == 1
    )
    store.remove_rewrite("default", "exact-old")  # the index follows the store
    assert (await h.route("food")).target_model == "food-new"


async def test_weighted_rewrite_split_statistics() -> None:
    store = make_store(1)
    store.set_rewrite(rewrite("split", 1, rule(("a", 30), ("b", 70), matches=["m"]), rule("u1", "u2", matches=["u"])))
    store.set_rewrite(rewrite("zeros", 2, rule(("z1", 0), ("z2", 0), matches=["z"])))
    h = Harness(store)
    weighted = Counter([(await h.route("m")).target_model for _ in range(4000)])
    assert 0.27 < weighted["a"] / 4000 < 0.33, weighted
    unset = Counter([(await h.route("u")).target_model for _ in range(2000)])
    assert 0.45 < unset["u1"] / 2000 < 0.55, unset
    zeros = Counter([(await h.route("z")).target_model for _ in range(2000)])
    assert 0.45 < zeros["z1"] / 2000 < 0.55, zeros


async def test_v1alpha2_unknown_model_is_404_but_v1_allows_it() -> None:
    h = Harness(make_store(2, api_version=V1ALPHA2))
    with pytest.raises(EppError) as err:
        await h.route("unknown")
    assert err.value.code is ErrorCode.NOT_FOUND
    assert err.value.msg == "error finding a model object in InferenceModel for input unknown"
    assert (await Harness(make_store(2)).route("unknown")).target_model == "unknown"


@pytest.mark.parametrize(("criticality", "priority"), [("Critical", 1), ("Standard", 0), ("Sheddable", -1), (None, 0)])
async def test_v1alpha2_criticality_to_priority(criticality: str | None, priority: int) -> None:
    store = make_store(2, api_version=V1ALPHA2)
    store.set_model(ModelSpec(name="obj", namespace="default", model_name="food", criticality=criticality))
    req = await Harness(store).route("food")
    assert (req.target_model, req.priority) == ("food", priority)


async def test_v1alpha2_target_models_weighted_split() -> None:
    store = make_store(1, api_version=V1ALPHA2)
    targets = (TargetModel("food-v1", 90), TargetModel("food-v2", 10))
    store.set_model(ModelSpec(name="obj", namespace="default", model_name="food", target_models=targets))
    h = Harness(store)
    counts = Counter([(await h.route("food")).target_model for _ in range(4000)])
    assert set(counts) == {"food-v1", "food-v2"}
    assert 0.87 < counts["food-v1"] / 4000 < 0.93, counts


async def test_objective_priority_overrides_criticality() -> None:
    store = make_store(2, api_version=V1ALPHA2)
    store.set_model(ModelSpec(name="obj", namespace="default", model_name="food", criticality="Critical"))
    store.set_objective(ObjectiveSpec(name="batch", namespace="default", priority=-5))
    store.set_objective(ObjectiveSpec(name="unset", namespace="default"))
    h = Harness(store)
    req = await h.route("food", x_gateway_inference_objective="batch")
    assert (req.priority, req.objective) == (-5, "batch")
    assert (await h.route("food", x_gateway_inference_objective="unset")).priority == 0
    assert (
        await h.route("food", x_gateway_inference_objective="missing")
    ).priority == 1  # no object: criticality stays
    assert (await h.route("food")).priority == 1


def saturated_harness() -> Harness:
    store = make_store(2)
    store.set_objective(ObjectiveSpec(name="batch", namespace="default", priority=-1))
    store.set_objective(ObjectiveSpec(name="interactive", namespace="default", priority=5))
    return Harness(store)


async def test_sheddable_shed_when_the_average_saturation_reaches_one() -> None:
    h = saturated_harness()
    set_metrics(
        h.store,
        pod_0=MetricsSnapshot(waiting_queue=5, updated_at=NOW),  # 1.0
        pod_1=MetricsSnapshot(kv_cache_usage=0.5, updated_at=NOW),  # 0.625
    )
    assert names((await h.decide(_req("batch"))).targets) == ["pod-1"]
    set_metrics(h.store, pod_1=MetricsSnapshot(kv_cache_usage=0.85, updated_at=NOW))
    with pytest.raises(EppError) as err:
        (await h.decide(_req("batch")))
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert err.value.msg == "system saturated, sheddable request dropped"
    # Priority >= 0 is never shed: critical and default work still get an endpoint.
    assert (await h.decide(_req("interactive"))).targets
    assert (await h.decide(_req(""))).targets


async def test_stale_metrics_count_as_saturated() -> None:
    h = saturated_harness()
    assert (await h.decide(_req("batch"))).targets  # fresh and idle
    h.clock.advance(1.0)  # nothing scraped for a second: older than the 200 ms threshold
    with pytest.raises(EppError, match="system saturated, sheddable request dropped"):
        (await h.decide(_req("batch")))
    assert (await h.decide(_req("interactive"))).targets


def _req(objective: str) -> InferenceRequest:
    headers = {"x-gateway-inference-objective": objective} if objective else {}
    return InferenceRequest(request_id="r", model="m", headers=headers)


async def test_subset_filters_candidates_by_ip() -> None:
    h = Harness(make_store(4))
    for _ in range(20):
        await h.route(subset=frozenset({"10.0.0.2", "10.9.9.9"}))
        assert names(h.last.targets) == ["pod-2"]
    for subset in (frozenset(), frozenset({"10.9.9.9"})):
        with pytest.raises(EppError) as err:
            await h.route(subset=subset)
        assert err.value.code is ErrorCode.SERVICE_UNAVAILABLE
        assert err.value.msg == "failed to find endpoint candidates for serving the request"


async def test_empty_pool_is_503() -> None:
    with pytest.raises(EppError) as err:
        await Harness(make_store(0)).route()
    assert err.value.code is ErrorCode.SERVICE_UNAVAILABLE


V03 = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins: [{type: legacy-filter-tree}, {type: random-picker}]
"""


async def test_v03_tree_has_no_admission_step_unless_a_detector_is_named() -> None:
    store = make_store(2)
    store.set_objective(ObjectiveSpec(name="batch", namespace="default", priority=-1))
    busy = MetricsSnapshot(waiting_queue=5, kv_cache_usage=0.5, updated_at=NOW)  # utilization 1.0
    set_metrics(store, pod_0=busy, pod_1=busy)
    assert Harness(store).config.admission  # the default profile: upstream's admission
    with pytest.raises(EppError, match="system saturated, sheddable request dropped"):
        await Harness(store).decide(_req("batch"))

    v03 = Harness(store, config_text=V03)
    assert not v03.config.admission
    assert (await v03.decide(_req("batch"))).targets  # v0.3 routed: queue <= 5 has capacity

    named = V03.replace(
        "plugins: [", "saturationDetector: {pluginRef: u}\nplugins: [{name: u, type: utilization-detector}, "
    )
    with_detector = Harness(store, config_text=named)
    assert with_detector.config.admission
    with pytest.raises(EppError, match="system saturated, sheddable request dropped"):
        (await with_detector.decide(_req("batch")))


async def test_scheduling_failure_is_429() -> None:
    h = Harness(make_store(2), config_text=V03)
    set_metrics(
        h.store,
        pod_0=MetricsSnapshot(waiting_queue=9, updated_at=NOW),
        pod_1=MetricsSnapshot(waiting_queue=9, updated_at=NOW),
    )
    with pytest.raises(EppError) as err:
        await h.route()
    assert err.value.code is ErrorCode.RESOURCE_EXHAUSTED
    assert err.value.msg.startswith("failed to find target endpoint: ")


async def test_route_headers_only() -> None:
    h = Harness(make_store(3))
    req = InferenceRequest(request_id="r")
    picked = Counter(names(h.headers_only(req).targets)[0] for _ in range(300))
    assert set(picked) == {"pod-0", "pod-1", "pod-2"}
    assert names(h.headers_only(req, frozenset({"10.0.0.1"})).targets) == ["pod-1"]
    with pytest.raises(EppError) as err:
        Harness(make_store(0)).headers_only(req)
    assert err.value.code is ErrorCode.INTERNAL
    assert err.value.msg == "no pods available in datastore"


class Hooks:
    """A scorer that also learns from decisions and responses (like the prefix-cache scorer)."""

    kinds = frozenset({PluginKind.SCORER, PluginKind.PRE_REQUEST, PluginKind.POST_RESPONSE})

    def __init__(self, name: str, *, fail: bool = False) -> None:
        self.typed_name = TypedName("hooks", name)
        self.fail = fail
        self.pre: list[str] = []
        self.post: list[str | None] = []

    def score(self, cycle: CycleState, request: InferenceRequest, candidates: Sequence[EndpointState]) -> list[float]:
        cycle["hooks-scored"] = len(candidates)
        return [0.0] * len(candidates)

    def pre_request(self, cycle: CycleState, request: InferenceRequest, result: SchedulingResult) -> None:
        if self.fail:
            raise RuntimeError("boom")
        self.pre.append(f"{result.primary.targets[0].endpoint.pod_name} scored {cycle['hooks-scored']}")

    def post_response(self, request: InferenceRequest, endpoint: EndpointState | None) -> None:
        if self.fail:
            raise RuntimeError("boom")
        self.post.append(endpoint.endpoint.pod_name if endpoint else None)


def hooks_harness(*, fail: bool) -> tuple[Harness, Hooks]:
    hooks = Hooks("h", fail=fail)
    registry = PluginRegistry()
    register_in_tree(registry)

    def factory(name: str, parameters: Mapping[str, Any], context: PluginContext) -> Hooks:
        return hooks

    registry.register("hooks", factory)
    text = """apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins: [{type: queue-scorer}, {name: h, type: hooks}]
"""
    return Harness(make_store(2), config_text=text, registry=registry), hooks


async def test_pre_request_and_post_response_plugins_run() -> None:
    h, hooks = hooks_harness(fail=False)
    req = await h.route()
    pod = names(h.last.targets)[0]
    assert hooks.pre == [f"{pod} scored 2"]  # same CycleState as the scheduling cycle
    h.finished(h.ctx, completed=True)
    h.finished(h.pipeline.context(req, None), completed=False)
    assert hooks.post == [pod, None]
    get = h.metrics.registry.get_sample_value
    count = "inference_extension_plugin_duration_seconds_count"
    assert get(count, {"extension_point": "PreRequest", "plugin_type": "hooks", "plugin_name": "h"}) == 1
    assert get(count, {"extension_point": "PostResponse", "plugin_type": "hooks", "plugin_name": "h"}) == 2


async def test_failing_hooks_are_counted_and_logged_not_raised(caplog: pytest.LogCaptureFixture) -> None:
    h, _ = hooks_harness(fail=True)
    with caplog.at_level(logging.ERROR, logger="epp.scheduling.plugin_errors"):
        await h.route()
        h.finished(h.ctx, completed=True)
    assert [(r.getMessage(), getattr(r, "extension_point", "")) for r in caplog.records] == [
        ("plugin failed; the request goes on by the extension point's rule", "PreRequest"),
        ("plugin failed; the request goes on by the extension point's rule", "PostResponse"),
    ]
    errors = "epp_plugin_errors_total"
    for point in ("PreRequest", "PostResponse"):
        labels = {"extension_point": point, "plugin_type": "hooks", "plugin_name": "h", "reason": "exception"}
        assert h.metrics.registry.get_sample_value(errors, labels) == 1


async def test_config_swap_applies_to_the_next_request() -> None:
    h = Harness(make_store(2))
    registry = PluginRegistry()
    register_in_tree(registry)
    legacy: LoadedConfig = load_config(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
        "plugins: [{type: legacy-filter-tree}, {type: random-picker}]\n",
        registry,
        PluginContext(clock=h.clock, seed=1),
    )
    set_metrics(
        h.store,
        pod_0=MetricsSnapshot(waiting_queue=9, updated_at=NOW),
        pod_1=MetricsSnapshot(waiting_queue=9, updated_at=NOW),
    )
    assert (await h.route()).target_model == "m"  # default profile routes the busy pool
    h.routing.apply(legacy)
    with pytest.raises(EppError, match="failed to find target endpoint"):  # v0.3 tree drops non-critical work
        await h.route()
