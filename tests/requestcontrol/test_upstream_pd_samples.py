"""Every P/D, E/P/D and data-parallel sample configuration of the llm-d router loads and routes here.

The samples are data: each one's path in llm-d/llm-d-router at ebab687927f5 (August 2026) and its
text, as published. Each is loaded by the real loader and a request is routed through a pool's real
pipeline over labelled pods (one prefill, two decode, one encode pod): a long uncached prompt, and
for the E/P/D samples a prompt with an image, whose routing is checked against what the sample is
for (the decode pod serves; the prefill and encode pods are named in their headers).

Every sample loads whole. Samples naming upstream's Alpha types (the ``topology-*`` plugins) load
as upstream deploys them, with ``--allow-experimental-plugins``, and are refused without it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from pool_harness import Harness
from scheduling_builders import NOW, parsed

from epp.config.loader import ConfigError
from epp.datastore.store import Datastore
from epp.datastore.types import PodInfo, PoolSpec
from epp.framework import headers
from epp.framework.plugin import PluginRegistry
from epp.framework.request import InferenceRequest, RoutingDecision
from epp.framework.roles import ROLE_LABEL
from epp.labels import Selector
from epp.plugins import register_in_tree


@dataclass(frozen=True)
class Sample:
    source: str
    text: str
    prefill: bool = False
    """A long uncached prompt names the prefill pod."""
    encode: bool = False
    """A prompt with an image names the encode pod."""
    primary_port: int = 0
    """The data-parallel rewrite: the destination's port, the rank in x-data-parallel-host-port."""


_ROLE_PROFILES = """\
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 1
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 1
"""

SAMPLES = (
    Sample(
        "deploy/config/pd-epp-config.yaml",
        """\
# Sample EPP configuration for running with P/D
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    maxPrefixTokensToMatch: 16384
    lruCapacityPerServer: 31250
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
"""
        + _ROLE_PROFILES,
        prefill=True,
    ),
    Sample(
        "deploy/config/pd-topology-epp-config.yaml",
        """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    maxPrefixTokensToMatch: 16384
    lruCapacityPerServer: 31250
- type: prefix-cache-scorer
- type: queue-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: topology-extractor
- type: topology-affinity-filter
- type: topology-affinity-scorer
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
  - pluginRef: topology-affinity-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 1
  - pluginRef: topology-affinity-scorer
    weight: 1
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 1
""",
        prefill=True,
    ),
    Sample(
        "deploy/config/sim-pd-epp-config.yaml",
        """\
# Sample EPP configuration for tunning with P/D
# Use with small hash block size for simulation purposes
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: approx-prefix-cache-producer
  parameters:
    blockSizeTokens: 16
    autoTune: false
    maxPrefixTokensToMatch: 16384
    lruCapacityPerServer: 31250
- type: prefix-cache-scorer
- type: queue-scorer
- type: prefill-filter
- type: decode-filter
- type: max-score-picker
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 16
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: prefix-based-pd-decider
"""
        + _ROLE_PROFILES,
        prefill=True,
    ),
    Sample(
        "deploy/config/sim-e-p-d-epp-config.yaml",
        """\
# Sample EPP configuration for running with E/P/D
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: encode-filter
- type: prefill-filter
- type: decode-filter
- type: disagg-profile-handler
  parameters:
    deciders:
      encode: always-disagg-multimodal-decider
      prefill: prefix-based-pd-decider
- type: always-disagg-multimodal-decider
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 16
schedulingProfiles:
- name: encode
  plugins:
  - pluginRef: encode-filter
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: queue-scorer
    weight: 1
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: queue-scorer
    weight: 1
""",
        prefill=True,
        encode=True,
    ),
    Sample(
        "deploy/config/sim-e-pd-epp-config.yaml",
        """\
# EPP configuration for E/PD (encode + prefill-decode) using disagg-profile-handler.
# The encode stage is triggered only for multimodal requests (image_url / video_url / input_audio).
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: encode-filter
- type: decode-filter
- type: max-score-picker
- type: always-disagg-multimodal-decider
- type: disagg-profile-handler
  parameters:
    deciders:
      encode: always-disagg-multimodal-decider
schedulingProfiles:
- name: encode
  plugins:
  - pluginRef: encode-filter
- name: decode
  plugins:
  - pluginRef: decode-filter
""",
        encode=True,
    ),
    Sample(
        "deploy/config/dp-epp-config.yaml",
        """\
# Sample EPP configuration for running with Data Parallel
#
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefix-cache-scorer
- type: decode-filter
- type: max-score-picker
- type: data-parallel-profile-handler
  parameters:
    primaryPort: 8000
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: prefix-cache-scorer
    weight: 2
""",
        primary_port=8000,
    ),
    Sample(
        "test/integration/epp/wellknown_configs_test.go#pd-disaggregation",
        """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: disagg-headers-handler
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: always-disagg-pd-decider
- type: always-disagg-pd-decider
- type: prefill-filter
- type: decode-filter
- type: prefix-cache-scorer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: active-request-scorer
- type: max-score-picker
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: max-score-picker
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: active-request-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: max-score-picker
""",
        prefill=True,
    ),
    Sample(
        "test/integration/epp/wellknown_configs_test.go#wide-ep-lws",
        """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: disagg-headers-handler
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: always-disagg-pd-decider
- type: always-disagg-pd-decider
- type: prefill-filter
- type: decode-filter
- type: prefix-cache-scorer
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: active-request-scorer
- type: max-score-picker
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
    weight: 2
  - pluginRef: max-score-picker
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: active-request-scorer
    weight: 2
  - pluginRef: prefix-cache-scorer
  - pluginRef: max-score-picker
""",
        prefill=True,
    ),
    Sample(
        "test/integration/epp/wellknown_configs_test.go#wide-ep-lws-experimental-dp-aware",
        """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: token-producer
- type: prefix-based-pd-decider
- type: prefill-header-handler
- type: prefill-filter
- type: decode-filter
- type: prefix-cache-scorer
- type: active-request-scorer
- type: queue-scorer
- type: pd-profile-handler
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: prefix-cache-scorer
    weight: 3
  - pluginRef: active-request-scorer
    weight: 2
  - pluginRef: queue-scorer
    weight: 2
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: active-request-scorer
    weight: 1
  - pluginRef: queue-scorer
    weight: 1
""",
        # its decider keeps the default nonCachedTokens: 0, which disables P/D: decode-only
    ),
    Sample(
        "docs/disaggregation.md#p-d-configuration",
        """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  # Prefill selection: match Pods with label role=prefill
  - type: label-selector-filter
    name: "prefill-pods"
    parameters:
      matchExpressions:
        - key: "role"
          operator: In
          values: ["prefill"]
  # Decode selection: match Pods with label role=decode
  - type: label-selector-filter
    name: "decode-pods"
    parameters:
      matchExpressions:
        - key: "role"
          operator: In
          values: ["decode"]
  - type: approx-prefix-cache-producer
    parameters:
      autoTune: false
      blockSizeTokens: 5
      maxPrefixTokensToMatch: 1280
      lruCapacityPerServer: 31250
  - type: prefix-cache-scorer
  - type: max-score-picker
  - type: prefix-based-pd-decider
    parameters:
      nonCachedTokens: 8
      promptTokens: 0
  - type: disagg-profile-handler
    parameters:
      profiles:
        prefill: prefill
        decode: decode
      deciders:
        prefill: prefix-based-pd-decider
schedulingProfiles:
  - name: prefill
    plugins:
      - pluginRef: "prefill-pods"
      - pluginRef: "max-score-picker"
      - pluginRef: "prefix-cache-scorer"
  - name: decode
    plugins:
      - pluginRef: "decode-pods"
      - pluginRef: "max-score-picker"
      - pluginRef: "prefix-cache-scorer"
""",
        prefill=True,  # its own label scheme (role=...): without the label filters any pod may take each stage
    ),
    Sample(
        "docs/disaggregation.md#e-p-d-configuration",
        """\
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
  - type: label-selector-filter
    name: "encode-pods"
    parameters:
      matchExpressions:
        - key: "role"
          operator: In
          values: ["encode"]
  - type: label-selector-filter
    name: "prefill-pods"
    parameters:
      matchExpressions:
        - key: "role"
          operator: In
          values: ["prefill"]
  - type: label-selector-filter
    name: "decode-pods"
    parameters:
      matchExpressions:
        - key: "role"
          operator: In
          values: ["decode"]
  - type: approx-prefix-cache-producer
    parameters:
      autoTune: false
      blockSizeTokens: 5
      maxPrefixTokensToMatch: 1280
      lruCapacityPerServer: 31250
  - type: prefix-cache-scorer
  - type: max-score-picker
  - type: always-disagg-multimodal-decider
  - type: prefix-based-pd-decider
    parameters:
      nonCachedTokens: 8
      promptTokens: 0
  - type: disagg-profile-handler
    parameters:
      profiles:
        encode: encode
        prefill: prefill
        decode: decode
      deciders:
        encode: always-disagg-multimodal-decider
        prefill: prefix-based-pd-decider
schedulingProfiles:
  - name: encode
    plugins:
      - pluginRef: "encode-pods"
  - name: prefill
    plugins:
      - pluginRef: "prefill-pods"
      - pluginRef: "max-score-picker"
      - pluginRef: "prefix-cache-scorer"
  - name: decode
    plugins:
      - pluginRef: "decode-pods"
      - pluginRef: "max-score-picker"
      - pluginRef: "prefix-cache-scorer"
""",
        prefill=True,
        encode=True,
    ),
)

LONG = "Summarise the following report in three bullet points. " * 30
IMAGE = {
    "model": "m",
    "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/cat.png"}}]}],
}
_ROLES = ("prefill", "decode", "decode", "encode")


def pool(*, ports: tuple[int, ...] = (8000,), labelled: bool = True) -> Datastore:
    store = Datastore()
    spec = PoolSpec(
        name="pool", namespace="default", selector=Selector.from_match_labels({"app": "vllm"}), target_ports=ports
    )
    pods = []
    for i, role in enumerate(_ROLES):
        labels = {"app": "vllm", ROLE_LABEL: role, "role": role} if labelled else {"app": "vllm"}
        pods.append(PodInfo(name=f"{role}-{i}", namespace="default", ip=f"10.0.0.{i}", labels=labels, ready=True))
    store.set_pool(spec, pods)
    for s in store.endpoints():
        s.metrics = s.metrics.__class__(updated_at=NOW)
    return store


def _registry() -> PluginRegistry:
    registry = PluginRegistry()
    register_in_tree(registry)
    return registry


def _loadable(sample: Sample) -> str:
    """The sample's text, once every type it names is registered here."""
    registered = _registry().types()
    missing = [p["type"] for p in yaml.safe_load(sample.text)["plugins"] if p["type"] not in registered]
    assert not missing, f"{sample.source}: unknown types {missing}"
    return sample.text


def _experimental(text: str) -> set[str]:
    registry = _registry()
    return {p["type"] for p in yaml.safe_load(text)["plugins"] if registry.is_experimental(p["type"])}


def _request(body: Mapping[str, Any], path: str) -> InferenceRequest:
    return parsed(path, body)


@pytest.mark.parametrize("sample", SAMPLES, ids=[s.source for s in SAMPLES])
async def test_the_sample_loads_and_routes(sample: Sample) -> None:
    text = _loadable(sample)
    ports = (8000, 8001) if sample.primary_port else (8000,)
    alpha = _experimental(text)
    if alpha:  # upstream's deployment runs the picker with --allow-experimental-plugins=true
        with pytest.raises(ConfigError, match="--allow-experimental-plugins"):
            Harness(pool(ports=ports), config_text=text)
    h = Harness(pool(ports=ports), config_text=text, allow_experimental_plugins=bool(alpha))
    decision = await h.decide(_request({"model": "m", "prompt": LONG, "max_tokens": 4}, "/v1/completions"))
    _check_roles(text, decision)
    prefill = decision.upstream_headers.get(headers.PREFILLER_HOST_PORT)
    assert bool(prefill) is sample.prefill, f"{sample.source}: x-prefiller-host-port {prefill!r}"
    if sample.primary_port:
        assert decision.destination == f"{decision.targets[0].endpoint.address}:{sample.primary_port}"
        assert decision.upstream_headers[headers.DATA_PARALLEL_HOST_PORT] == decision.targets[0].endpoint.hostport
    if sample.encode:
        media = await h.decide(_request(IMAGE, "/v1/chat/completions"))
        _check_roles(text, media)
        assert media.upstream_headers.get(headers.ENCODER_HOSTS_PORTS), f"{sample.source}: no encoder named"


def _check_roles(text: str, decision: RoutingDecision) -> None:
    """Where the role filters are in the configuration, each stage went to a pod of its role."""
    if "decode-filter" in text:
        assert decision.targets[0].endpoint.labels[ROLE_LABEL] == "decode"
    named = decision.upstream_headers
    if "prefill-filter" in text and headers.PREFILLER_HOST_PORT in named:
        assert named[headers.PREFILLER_HOST_PORT] == "10.0.0.0:8000"  # the prefill pod
    if "encode-filter" in text and headers.ENCODER_HOSTS_PORTS in named:
        assert named[headers.ENCODER_HOSTS_PORTS] == "10.0.0.3:8000"  # the encode pod
