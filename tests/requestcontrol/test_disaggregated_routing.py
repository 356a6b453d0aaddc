"""Disaggregated serving in the picker: role filters, deciders, the disagg handler and its deprecated forms.

Configurations load through the real loader and requests run through a pool's real pipeline over a
Datastore of labelled pods; what the gateway would be told (destination, forwarded headers, removed
client headers) and what is counted are asserted, as the request path sees them.
"""

from __future__ import annotations

import pytest
from pool_harness import Harness
from scheduling_builders import NOW, parsed

from epp.config.loader import ConfigError
from epp.config.options import MetricsNaming
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework import headers
from epp.framework.disaggregation import publish_match
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import PluginConfigError, PluginContext
from epp.framework.request import InferenceRequest
from epp.framework.roles import ROLE_LABEL
from epp.framework.scheduling import CycleState, ProfileResult, SchedulingResult
from epp.labels import Selector
from epp.plugins import pd_deciders, role_filters
from epp.telemetry.metrics import EppMetrics

SELECTOR = Selector.from_match_labels({"app": "vllm"})
PD_CONFIG = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters: {autoTune: false, blockSizeTokens: 16}
- type: prefix-cache-scorer
- type: queue-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: prefix-based-pd-decider
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 16
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
"""
LONG = "the quick brown fox jumps over the lazy dog " * 40  # ~440 estimated tokens
SHORT = "hello there"


def roles_store(*roles: str | None, ports: tuple[int, ...] = (8000,)) -> Datastore:
    """Pods ``pod-i`` at 10.0.0.i, labelled with role ``roles[i]`` (None: no role label)."""
    store = Datastore()
    pool = PoolSpec(name="pool", namespace="default", selector=SELECTOR, target_ports=ports, api_version="v1")
    pods = []
    for i, role in enumerate(roles):
        labels = {"app": "vllm"} | ({ROLE_LABEL: role} if role is not None else {})
        pods.append(PodInfo(name=f"pod-{i}", namespace="default", ip=f"10.0.0.{i}", labels=labels, ready=True))
    store.set_pool(pool, pods)
    for s in store.endpoints():
        s.metrics = MetricsSnapshot(updated_at=NOW)
    return store


def completion(prompt: str, **extra_headers: str) -> InferenceRequest:
    request = parsed("/v1/completions", {"model": "m", "prompt": prompt})
    request.headers = {**request.headers, **extra_headers}
    return request


def labelled(role: str | None) -> EndpointState:
    labels = {} if role is None else {ROLE_LABEL: role}
    return EndpointState(Endpoint("default", f"p-{role}", "p", "10.0.0.9", 8000, labels=labels))


# -- role filters ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("create", "kept"),
    [
        (role_filters.create_decode, {"decode", "prefill-decode", "both", "encode-prefill-decode", None}),
        (role_filters.create_prefill, {"prefill", "encode-prefill", "prefill-decode", "both", "encode-prefill-decode"}),
        (role_filters.create_encode, {"encode", "encode-prefill", "encode-prefill-decode"}),
    ],
)
def test_role_filters_keep_upstream_roles(create: object, kept: set[str | None]) -> None:
    every: list[str | None] = [
        "prefill", "decode", "encode", "prefill-decode", "encode-prefill", "encode-prefill-decode", "both",
        "encode-decode", "", "Decode", None,
    ]  # fmt: skip
    plugin = create("f", {}, PluginContext())  # type: ignore[operator]
    states = [labelled(role) for role in every]
    out = plugin.filter(CycleState(), InferenceRequest("r"), states)
    assert {s.endpoint.labels.get(ROLE_LABEL) for s in out} == kept


def test_role_filters_take_no_parameters() -> None:
    with pytest.raises(PluginConfigError, match=r"prefill-filter.parameters: unknown field\(s\) \['label'\]"):
        role_filters.create_prefill("f", {"label": "x"}, PluginContext())


# -- deciders -------------------------------------------------------------------------------------


def test_prefix_decider_compares_the_uncached_suffix_with_the_threshold() -> None:
    decider = pd_deciders.create_prefix_based("d", {"nonCachedTokens": 100}, PluginContext())
    decode = labelled("decode")
    request = completion(LONG)  # 1760 bytes → 440 tokens (bytes / 4)
    cycle = CycleState()
    publish_match(cycle, [decode], {decode.endpoint.key: 10}, total_blocks=27, block_size_tokens=16)
    verdict = decider.decide(cycle, request, decode)
    assert verdict.disaggregate
    assert verdict.numbers["prompt_tokens"] == 440 and verdict.numbers["cached_tokens"] == 160
    assert verdict.numbers["non_cached_tokens"] == 280 and verdict.numbers["prompt_tokens_estimated"] == 1

    publish_match(cycle, [decode], {decode.endpoint.key: 25}, total_blocks=27, block_size_tokens=16)  # 400 held
    verdict = decider.decide(cycle, request, decode)
    assert not verdict.disaggregate and verdict.numbers["non_cached_tokens"] == 40
    assert "fewer than nonCachedTokens" in verdict.reason


def test_prefix_decider_gates_and_refusals() -> None:
    decode = labelled("decode")
    cycle = CycleState()
    publish_match(cycle, [decode], {}, 27, 16)
    ctx = PluginContext()
    assert "disabled" in pd_deciders.create_prefix_based("d", {}, ctx).decide(cycle, completion(LONG), decode).reason
    gated = pd_deciders.create_prefix_based("d", {"nonCachedTokens": 8, "promptTokens": 1000}, ctx)
    assert "shorter than promptTokens" in gated.decide(cycle, completion(LONG), decode).reason
    short = pd_deciders.create_prefix_based("d", {"nonCachedTokens": 8}, ctx)
    assert "shorter than nonCachedTokens" in short.decide(cycle, completion(SHORT), decode).reason
    assert "no decode pick" in short.decide(cycle, completion(LONG), None).reason
    with pytest.raises(PluginConfigError, match=r"nonCachedTokens: must be >= 0, got -1"):
        pd_deciders.create_prefix_based("d", {"nonCachedTokens": -1}, ctx)


def test_prefix_decider_keeps_its_own_index_when_nothing_scored_the_prefix() -> None:
    decider = pd_deciders.create_prefix_based("d", {"nonCachedTokens": 16}, PluginContext())
    decode, prefill = labelled("decode"), labelled("prefill")
    cycle = CycleState()  # no prefix-cache-scorer published anything
    first = decider.decide(cycle, completion(LONG), decode)
    assert first.disaggregate and first.numbers["cached_tokens"] == 0
    result = SchedulingResult({"decode": ProfileResult([decode]), "prefill": ProfileResult([prefill])}, "decode")
    decider.pre_request(cycle, completion(LONG), result)  # both stages' pods now hold the prompt
    again = decider.decide(CycleState(), completion(LONG), decode)
    assert not again.disaggregate and again.numbers["non_cached_tokens"] < 16
    decider.endpoints_removed([decode.endpoint.key])
    assert decider.decide(CycleState(), completion(LONG), decode).disaggregate


def test_prefix_decider_counts_produced_tokens() -> None:
    decider = pd_deciders.create_prefix_based("d", {"nonCachedTokens": 3}, PluginContext())
    request = completion(LONG)
    request.token_ids = [1, 2, 3, 4]
    decode = labelled("decode")
    cycle = CycleState()
    publish_match(cycle, [decode], {}, 1, 16)
    verdict = decider.decide(cycle, request, decode)
    assert verdict.disaggregate and verdict.numbers["prompt_tokens"] == 4
    assert verdict.numbers["prompt_tokens_estimated"] == 0


def test_multimodal_decider_looks_for_media_parts() -> None:
    decider = pd_deciders.create_always_multimodal("mm", {}, PluginContext())
    image = parsed(
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "what"}, {"type": "image_url", "image_url": {"url": "x"}}],
                }
            ],
        },
    )
    text = parsed("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert decider.decide(CycleState(), image, None).disaggregate
    assert not decider.decide(CycleState(), text, None).disaggregate
    always = pd_deciders.create_always_pd("a", {}, PluginContext())
    assert always.decide(CycleState(), text, None).disaggregate


# -- the disagg handler through the pipeline ---------------------------------------------------------


async def test_long_uncached_prompt_goes_to_a_decode_pod_with_its_prefill_pod_named() -> None:
    h = Harness(roles_store("prefill", "decode", "decode"), config_text=PD_CONFIG)
    decision = await h.decide(completion(LONG))
    assert decision.targets[0].endpoint.labels[ROLE_LABEL] == "decode"
    assert decision.upstream_headers[headers.PREFILLER_HOST_PORT] == "10.0.0.0:8000"
    assert (
        h.metrics.registry.get_sample_value(
            "llm_d_epp_disagg_decision_total",
            {
                "plugin_name": "disagg-profile-handler",
                "plugin_type": "disagg-profile-handler",
                "model_name": "m",
                "decision_type": "prefill-decode",
            },
        )
        == 1
    )
    assert (
        h.metrics.registry.get_sample_value(
            "llm_d_inference_scheduler_disagg_decision_total", {"model_name": "m", "decision_type": "prefill-decode"}
        )
        == 1
    )


@pytest.mark.parametrize(("naming", "current", "deprecated"), [("both", 1, 1), ("llm-d", 1, None), ("gie", None, None)])
async def test_decision_series_appear_with_the_first_decision_under_each_naming(
    naming: MetricsNaming, current: int | None, deprecated: int | None
) -> None:
    h = Harness(roles_store("prefill", "decode"), config_text=PD_CONFIG, metrics=EppMetrics(naming=naming))

    def families() -> set[str]:
        return {m.name for m in h.metrics.registry.collect()}

    assert not {"llm_d_epp_disagg_decision", "llm_d_inference_scheduler_disagg_decision"} & families()
    await h.decide(completion(LONG))
    labels = {"model_name": "m", "decision_type": "prefill-decode"}
    handler = {"plugin_name": "disagg-profile-handler", "plugin_type": "disagg-profile-handler"}
    get = h.metrics.registry.get_sample_value
    assert get("llm_d_epp_disagg_decision_total", {**handler, **labels}) == current
    assert get("llm_d_inference_scheduler_disagg_decision_total", labels) == deprecated
    assert ("llm_d_inference_scheduler_pd_decision" in families()) is (deprecated is not None)


async def test_short_or_cached_prompts_are_decoded_only() -> None:
    h = Harness(roles_store("prefill", "decode"), config_text=PD_CONFIG)
    assert headers.PREFILLER_HOST_PORT not in (await h.decide(completion(SHORT))).upstream_headers
    first = await h.decide(completion(LONG))
    assert headers.PREFILLER_HOST_PORT in first.upstream_headers  # the decode pod now holds it (approximate index)
    again = await h.decide(completion(LONG))
    assert headers.PREFILLER_HOST_PORT not in again.upstream_headers
    assert again.targets[0].endpoint.pod_name == "pod-1"
    decode_only = {"decision_type": "decode-only", "model_name": "m"}
    labels = {"plugin_name": "disagg-profile-handler", "plugin_type": "disagg-profile-handler", **decode_only}
    assert h.metrics.registry.get_sample_value("llm_d_epp_disagg_decision_total", labels) == 2


async def test_a_client_cannot_name_the_prefill_pod() -> None:
    h = Harness(roles_store("prefill", "decode"), config_text=PD_CONFIG)
    decision = await h.decide(completion(SHORT, **{headers.PREFILLER_HOST_PORT: "6.6.6.6:1"}))
    assert headers.PREFILLER_HOST_PORT not in decision.upstream_headers
    assert decision.cleared_headers == {headers.PREFILLER_HOST_PORT}
    replaced = await h.decide(completion(LONG, **{headers.PREFILLER_HOST_PORT: "6.6.6.6:1"}))
    assert replaced.upstream_headers[headers.PREFILLER_HOST_PORT] == "10.0.0.0:8000"
    assert not replaced.cleared_headers  # overwritten, nothing to remove


async def test_no_prefill_pod_means_decode_only_and_no_decode_pod_fails() -> None:
    h = Harness(roles_store("decode", "decode"), config_text=PD_CONFIG)
    decision = await h.decide(completion(LONG))
    assert headers.PREFILLER_HOST_PORT not in decision.upstream_headers
    h = Harness(roles_store("prefill"), config_text=PD_CONFIG)
    with pytest.raises(Exception, match="profile 'decode': no endpoints available"):
        await h.decide(completion(LONG))


async def test_unlabelled_pods_serve_decode() -> None:
    h = Harness(roles_store(None, None), config_text=PD_CONFIG)
    decision = await h.decide(completion(LONG))
    assert decision.targets and headers.PREFILLER_HOST_PORT not in decision.upstream_headers


def _config(handler: str, *, extra_plugins: str = "", profiles: str = "") -> str:
    return f"""\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: encode-filter
- type: always-disagg-pd-decider
- type: always-disagg-multimodal-decider
{extra_plugins}- {handler}
schedulingProfiles:
- name: prefill
  plugins: [{{pluginRef: prefill-filter}}]
- name: decode
  plugins: [{{pluginRef: decode-filter}}]
{profiles}"""


async def test_prefill_first_runs_prefill_then_decode() -> None:
    text = _config("type: disagg-profile-handler\n  parameters: {stageOrder: Prefill_First}")
    h = Harness(roles_store("prefill", "decode"), config_text=text)
    decision = await h.decide(completion(SHORT))
    assert decision.upstream_headers[headers.PREFILLER_HOST_PORT] == "10.0.0.0:8000"
    assert decision.targets[0].endpoint.pod_name == "pod-1"
    with pytest.raises(ConfigError, match="prefill decider is not supported with stageOrder prefill-first"):
        Harness(
            roles_store("decode"),
            config_text=_config(
                "type: disagg-profile-handler\n  parameters: {stageOrder: prefill-first, "
                "deciders: {prefill: always-disagg-pd-decider}}"
            ),
        )


async def test_encode_stage_for_media_requests() -> None:
    handler = (
        "type: disagg-profile-handler\n  parameters: {deciders: {encode: always-disagg-multimodal-decider, "
        "prefill: always-disagg-pd-decider}}"
    )
    text = _config(handler, profiles="- name: encode\n  plugins: [{pluginRef: encode-filter}]\n")
    h = Harness(roles_store("encode", "prefill", "decode"), config_text=text)
    media = parsed(
        "/v1/chat/completions",
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}]},
    )
    decision = await h.decide(media)
    assert decision.upstream_headers == {
        headers.ENCODER_HOSTS_PORTS: "10.0.0.0:8000",
        headers.PREFILLER_HOST_PORT: "10.0.0.1:8000",
    }
    plain = await h.decide(completion(SHORT))
    assert headers.ENCODER_HOSTS_PORTS not in plain.upstream_headers


@pytest.mark.parametrize(
    ("parameters", "message"),
    [
        ("{deciders: {prefill: nope}}", "deciders.prefill: references undefined plugin 'nope'"),
        ("{deciders: {prefill: decode-filter}}", "plugin 'decode-filter' .type 'decode-filter'. is not a decider"),
        ("{stageOrder: sideways}", "invalid stage order 'sideways'"),
        ("{prefillProfile: p, profiles: {decode: d}}", "mixed with profiles/deciders"),
        ("{profiles: {decode: d, other: x}}", r"profiles: unknown field\(s\) \['other'\]"),
    ],
)
def test_handler_parameter_errors(parameters: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        Harness(roles_store("decode"), config_text=_config(f"type: disagg-profile-handler\n  parameters: {parameters}"))


async def test_deprecated_flat_parameters_still_work() -> None:
    text = _config(
        "type: disagg-profile-handler\n  parameters: {deciderPluginName: always-disagg-pd-decider, "
        "decodeProfile: decode}"
    )
    h = Harness(roles_store("prefill", "decode"), config_text=text)
    assert headers.PREFILLER_HOST_PORT in (await h.decide(completion(SHORT))).upstream_headers
    flat = {n.setting: n.detail for n in h.config.notices if ".parameters." in n.setting}
    assert flat == {
        "plugins[5].parameters.deciderPluginName": "use deciders.prefill",
        "plugins[5].parameters.decodeProfile": "use profiles.decode",
    }
    assert all(n.deprecated for n in h.config.notices if n.setting in flat)


async def test_pd_profile_handler_needs_the_headers_handler_and_counts_pd_decisions() -> None:
    text = _config(
        "type: pd-profile-handler\n  parameters: {deciderPluginName: always-disagg-pd-decider}",
        extra_plugins="- type: prefill-header-handler\n",
    )
    h = Harness(roles_store("prefill", "decode"), config_text=text)
    decision = await h.decide(completion(SHORT))
    assert decision.upstream_headers == {headers.PREFILLER_HOST_PORT: "10.0.0.0:8000"}
    labels = {
        "plugin_name": "pd-profile-handler",
        "plugin_type": "pd-profile-handler",
        "model_name": "m",
        "decision_type": "prefill-decode",
    }
    assert h.metrics.registry.get_sample_value("llm_d_epp_pd_decision_total", labels) == 1
    notices = {n.setting: n.detail for n in h.config.notices}
    assert "pd-profile-handler is deprecated, use disagg-profile-handler" in notices["plugins[6].type"]
    assert "prefill-header-handler is deprecated" in notices["plugins[5].type"]
    assert h.config.plugins["prefill-header-handler"].typed_name.type == "disagg-headers-handler"


async def test_pd_profile_handler_default_decider_must_exist() -> None:
    with pytest.raises(ConfigError, match="deciderPluginName: references undefined plugin 'prefix-based-pd-decider'"):
        Harness(roles_store("decode"), config_text=_config("type: pd-profile-handler"))


async def test_primary_port_sends_to_the_pod_and_names_the_rank() -> None:
    text = _config(
        "type: pd-profile-handler\n  parameters: {deciderPluginName: always-disagg-pd-decider, primaryPort: 8000}"
    )
    h = Harness(roles_store("decode", ports=(8000, 8001, 8002)), config_text=text)
    for s in h.store.endpoints():
        s.metrics = MetricsSnapshot(updated_at=NOW, waiting_queue=0 if s.endpoint.port == 8002 else 5)
    decision = await h.decide(completion(SHORT))
    assert decision.destination == "10.0.0.0:8000"
    assert decision.upstream_headers[headers.DATA_PARALLEL_HOST_PORT] == decision.targets[0].endpoint.hostport


async def test_data_parallel_profile_handler() -> None:
    text = """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: decode-filter
- type: data-parallel-profile-handler
  parameters: {primaryPort: 8000}
schedulingProfiles:
- name: default
  plugins: [{pluginRef: decode-filter}, {pluginRef: queue-scorer}]
"""
    h = Harness(roles_store(None, ports=(8000, 8001, 8002, 8003)), config_text=text)
    for s in h.store.endpoints():
        s.metrics = MetricsSnapshot(updated_at=NOW, waiting_queue=0 if s.endpoint.port == 8002 else 3)
    decision = await h.decide(completion(SHORT, **{headers.DATA_PARALLEL_HOST_PORT: "1.2.3.4:5"}))
    assert decision.destination == "10.0.0.0:8000"
    assert decision.upstream_headers == {headers.DATA_PARALLEL_HOST_PORT: "10.0.0.0:8002"}
    assert decision.targets[0].in_flight_requests == 1  # counted on the rank that serves it
    with pytest.raises(ConfigError, match="primaryPort: must be between 1 and 65535, got 70000"):
        Harness(roles_store(None), config_text=text.replace("8000}", "70000}"))
