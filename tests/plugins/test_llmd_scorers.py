"""The llm-d router's scorers: load-aware, no-hit LRU, context length, header-label affinity, endpoint
attribute, topology affinity (with the topology-affinity filter and the extractor they read)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import pytest

from epp.framework.data import DataScope
from epp.framework.data_keys import PrefixCacheMatches
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import Plugin, PluginConfigError, PluginContext
from epp.framework.prompt import TokenPrompt
from epp.framework.request import InferenceRequest
from epp.framework.scheduling import PEER_ENDPOINT, CycleState, ProfileResult, SchedulingResult
from epp.plugins import (
    context_length_aware,
    endpoint_attribute_scorer,
    header_label_affinity_scorer,
    load_aware_scorer,
    no_hit_lru_scorer,
    topology_affinity_filter,
    topology_affinity_scorer,
    topology_extractor,
)


def _state(
    name: str, labels: Mapping[str, str] | None = None, *, queue: int = 0, custom: Mapping[str, float] | None = None
) -> EndpointState:
    endpoint = Endpoint(namespace="ns", name=name, pod_name=name, address="10.0.0.1", port=8000, labels=labels or {})
    return EndpointState(endpoint, MetricsSnapshot(waiting_queue=queue, custom=custom or {}))


def _lookup(plugins: Mapping[str, object]) -> Any:
    def lookup(where: str, name: str) -> Plugin:
        if name not in plugins:
            raise PluginConfigError(f"{where}: references undefined plugin {name!r}")
        return plugins[name]  # type: ignore[return-value]

    return lookup


REQ = InferenceRequest(request_id="r")


def test_load_aware_half_for_an_empty_queue_down_to_zero_at_the_threshold() -> None:
    scorer = load_aware_scorer.create("s", {"threshold": 10}, PluginContext())
    pods = [_state("a"), _state("b", queue=5), _state("c", queue=10), _state("d", queue=50)]
    assert scorer.score(CycleState(), REQ, pods) == [0.5, 0.25, 0.0, 0.0]
    assert load_aware_scorer.create("s", {}, PluginContext()).threshold == 128
    with pytest.raises(PluginConfigError, match="threshold"):
        load_aware_scorer.create("s", {"threshold": 0}, PluginContext())


def _routed(
    scorer: no_hit_lru_scorer.NoHitLruScorer, pods: list[EndpointState], pick: int, blocks: list[int] | None = None
) -> list[float]:
    """Score ``pods`` for a request whose prefix-match info holds ``blocks`` (none: the producer found none)."""
    request = InferenceRequest(request_id="r")
    if blocks is not None:
        request.attributes[scorer.reader.key.id] = PrefixCacheMatches(
            {p.endpoint.key: b for p, b in zip(pods, blocks, strict=True)}, 4, 16
        )
    cycle = CycleState()
    scores = scorer.score(cycle, request, pods)
    scorer.pre_request(cycle, request, SchedulingResult({"default": ProfileResult([pods[pick]])}, "default"))
    return scores


def test_no_hit_lru_spreads_cold_requests_and_stays_neutral_on_a_hit() -> None:
    scorer = no_hit_lru_scorer.create("lru", {"lruSize": 8}, PluginContext())
    scorer.bind_data_scope(DataScope.of(scorer))
    pods = [_state("a"), _state("b"), _state("c")]
    assert _routed(scorer, pods, 0) == [1.0, 0.5, 0.0]  # never used, in candidate order
    assert _routed(scorer, pods, 1, [0, 0, 0]) == [0.0, 1.0, 0.5]  # a was just used: never-used b, c first
    assert _routed(scorer, pods, 2) == [0.5, 0.0, 1.0]
    assert _routed(scorer, pods, 0) == [1.0, 0.5, 0.0]  # a is the least recently used now
    assert _routed(scorer, pods, 1, [0, 3, 0]) == [0.5, 0.5, 0.5]  # a hit somewhere: neutral, the LRU left alone
    assert _routed(scorer, pods, 1) == [0.0, 1.0, 0.5]
    scorer.endpoints_removed(["ns/b"])
    assert _routed(scorer, [_state("b"), pods[2]], 0) == [1.0, 0.0]  # b forgotten: never used again


def test_no_hit_lru_reads_a_producers_matches_and_keeps_upstreams_unused_parameters() -> None:
    scorer = no_hit_lru_scorer.create("lru", {"prefixPluginType": "x", "prefixPluginName": "y"}, PluginContext())
    assert [k.id for k in scorer.consumes().required] == ["PrefixCacheMatchInfoDataKey/approx-prefix-cache-producer"]
    named = no_hit_lru_scorer.create("lru", {"prefixMatchInfoProducerName": "precise"}, PluginContext())
    assert [k.id for k in named.consumes().required] == ["PrefixCacheMatchInfoDataKey/precise"]
    with pytest.raises(PluginConfigError, match="lruSize"):
        no_hit_lru_scorer.create("lru", {"lruSize": 0}, PluginContext())


def test_context_length_scores_and_filters_by_the_range_label() -> None:
    label = "llm-d.ai/context-length-range"
    pods = [
        _state("short", {label: "0-2048"}),
        _state("long", {label: "2048-8192"}),
        _state("none"),
        _state("bad", {label: "lots"}),
    ]
    plugin = context_length_aware.create("c", {"enableFiltering": True}, PluginContext())
    request = InferenceRequest(request_id="r", token_ids=list(range(1000)))
    short, long, none, bad = plugin.score(CycleState(), request, pods)
    assert short > 0.3 > long > 0 and none == 0.5 and bad == 0.0
    assert [s.endpoint.name for s in plugin.filter(CycleState(), request, pods)] == ["short", "none"]
    big = InferenceRequest(request_id="r", size=4 * 9000)  # no tokens: body bytes / 4
    short, long, _, _ = plugin.score(CycleState(), big, pods)
    assert long > short  # both out of range: the closer bound wins
    assert context_length_aware.context_length(InferenceRequest(request_id="r", prompt=TokenPrompt([1, 2, 3]))) == 3
    assert context_length_aware.range_score(5, 5, 5) == 1.0
    assert context_length_aware.range_score(0, 0, 10000) == pytest.approx(0.3 + 0.7 * (0.7 * 0.5 + 0.3))
    passthrough = context_length_aware.create("c", {}, PluginContext())
    assert passthrough.filter(CycleState(), request, pods) == pods


def test_header_label_affinity() -> None:
    scorer = header_label_affinity_scorer.create(
        "s", {"headerName": "X-Disagg-Slice", "labelKey": "slice"}, PluginContext()
    )
    pods = [_state("a", {"slice": "0"}), _state("b", {"slice": "1"}), _state("c")]
    asked = InferenceRequest(request_id="r", headers={"x-disagg-slice": "1"})
    assert scorer.score(CycleState(), asked, pods) == [0.0, 1.0, 0.0]
    assert scorer.score(CycleState(), REQ, pods) == [0.0, 0.0, 0.0]
    with pytest.raises(PluginConfigError, match="labelKey"):
        header_label_affinity_scorer.create("s", {"headerName": "x"}, PluginContext())


def test_endpoint_attribute_scorer_adaptive_and_fixed_ranges() -> None:
    pods = [_state("a", custom={"q": 2}), _state("b", custom={"q": 6}), _state("c", custom={"q": 10}), _state("d")]
    adaptive = {"attributeKey": "q", "algorithm": {"type": "linear_lower_is_better"}}
    assert endpoint_attribute_scorer.create("s", adaptive, PluginContext()).score(CycleState(), REQ, pods) == [
        1.0,
        0.5,
        0.0,
        0.0,
    ]
    fixed = {
        "attributeKey": "q",
        "algorithm": {"type": "linear_higher_is_better", "normalization": {"fixedRange": {"min": 0, "max": 8}}},
    }
    assert endpoint_attribute_scorer.create("s", fixed, PluginContext()).score(CycleState(), REQ, pods) == [
        0.25,
        0.75,
        1.0,
        0.0,
    ]
    same = [_state("a", custom={"q": 3}), _state("b", custom={"q": 3}), _state("c")]
    assert endpoint_attribute_scorer.create("s", adaptive, PluginContext()).score(CycleState(), REQ, same) == [
        1.0,
        1.0,
        0.0,
    ]


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"algorithm": {"type": "linear_lower_is_better"}}, "attributeKey"),
        ({"attributeKey": "q", "algorithm": {"type": "log"}}, "algorithm.type"),
        (
            {
                "attributeKey": "q",
                "algorithm": {"type": "linear_lower_is_better", "normalization": {"fixedRange": {"min": 1, "max": 1}}},
            },
            "fixedRange",
        ),
        (
            {
                "attributeKey": "q",
                "algorithm": {
                    "type": "linear_lower_is_better",
                    "normalization": {"fixedRange": {}, "adaptiveRange": {}},
                },
            },
            "at most one strategy",
        ),
    ],
)
def test_endpoint_attribute_scorer_bad_parameters(params: dict[str, Any], field: str) -> None:
    with pytest.raises(PluginConfigError, match=re.escape(field)):
        endpoint_attribute_scorer.create("s", params, PluginContext())


HOST, RACK, ZONE, REGION = (
    "kubernetes.io/hostname",
    "topology.kubernetes.io/rack",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
)


def _topology_pods() -> list[EndpointState]:
    return [
        _state("peer", {HOST: "h1", RACK: "r1", ZONE: "z1", REGION: "eu"}),
        _state("same-host", {HOST: "h1", RACK: "r1", ZONE: "z1", REGION: "eu"}),
        _state("same-rack", {HOST: "h2", RACK: "r1", ZONE: "z1", REGION: "eu"}),
        _state("same-zone", {HOST: "h3", RACK: "r2", ZONE: "z1", REGION: "eu"}),
        _state("same-region", {HOST: "h4", ZONE: "z2", REGION: "eu"}),
        _state("elsewhere", {HOST: "h5", REGION: "us"}),
        _state("unlabelled"),
    ]


def test_topology_scorer_and_filter_against_the_peer() -> None:
    extractor = topology_extractor.create("topology-extractor", {}, PluginContext())
    pods = _topology_pods()
    extractor.endpoints_added(pods)
    assert extractor.topology(pods[-1]) is None
    scorer = topology_affinity_scorer.create("s", {}, PluginContext())
    scorer.resolve_references(_lookup({"topology-extractor": extractor}))
    cycle = CycleState()
    candidates = pods[1:]
    assert scorer.score(cycle, REQ, candidates) == [0.0] * 6  # no peer yet
    cycle[PEER_ENDPOINT] = pods[0]
    assert scorer.score(cycle, REQ, candidates) == [1.0, 0.2, 0.05, 0.02, 0.0, 0.0]

    def kept(level: str | None) -> list[str]:
        flt = topology_affinity_filter.create("f", {"minAffinity": level} if level else {}, PluginContext())
        flt.resolve_references(_lookup({"topology-extractor": extractor}))
        return [s.endpoint.name for s in flt.filter(cycle, REQ, candidates)]

    assert kept(None) == ["same-host"]
    assert kept("rack") == ["same-host", "same-rack"]
    assert kept("zone") == ["same-host", "same-rack", "same-zone"]
    assert kept("region") == ["same-host", "same-rack", "same-zone", "same-region"]
    flt = topology_affinity_filter.create("f", {}, PluginContext())
    flt.resolve_references(_lookup({"topology-extractor": extractor}))
    assert flt.filter(cycle, REQ, pods[5:]) == pods[5:]  # none close enough: fail open
    assert flt.filter(CycleState(), REQ, candidates) == candidates  # no peer: fail open
    extractor.endpoints_removed(["ns/peer"])
    assert scorer.score(cycle, REQ, candidates) == [0.0] * 6  # the peer's topology is gone


def test_topology_labels_are_parameters_and_the_producer_is_optional_unless_named() -> None:
    extractor = topology_extractor.create("topo", {"hostname": "node", "zone": "az"}, PluginContext())
    pods = [_state("a", {"node": "n1", "az": "1"}), _state("b", {"node": "n2", "az": "1"})]
    extractor.endpoints_added(pods)
    scorer = topology_affinity_scorer.create("s", {"topologyProducerName": "topo"}, PluginContext())
    scorer.resolve_references(_lookup({"topo": extractor}))
    cycle = CycleState({PEER_ENDPOINT: pods[0]})
    assert scorer.score(cycle, REQ, pods) == [1.0, 0.05]
    unnamed = topology_affinity_scorer.create("s", {}, PluginContext())
    unnamed.resolve_references(_lookup({}))  # no topology-extractor declared: no topology, no error
    assert unnamed.score(cycle, REQ, pods) == [0.0, 0.0]
    named = topology_affinity_filter.create("f", {"topologyProducerName": "missing"}, PluginContext())
    with pytest.raises(PluginConfigError, match="missing"):
        named.resolve_references(_lookup({}))
    with pytest.raises(PluginConfigError, match="not a topology-extractor"):
        named.resolve_references(_lookup({"missing": load_aware_scorer.LoadAwareScorer()}))
    with pytest.raises(PluginConfigError, match="minAffinity"):
        topology_affinity_filter.create("f", {"minAffinity": "planet"}, PluginContext())
