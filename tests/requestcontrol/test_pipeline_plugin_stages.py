"""The pipeline's admission-plugin stage and its response-complete stage, with real plugins from a configuration."""

from __future__ import annotations

import pytest
from pool_harness import Harness
from scheduling_builders import NOW

from epp.datastore.store import Datastore
from epp.datastore.types import ObjectiveSpec, PodInfo, PoolSpec
from epp.errors import EppError, ErrorCode
from epp.framework.endpoint import MetricsSnapshot
from epp.framework.request import InferenceRequest
from epp.framework.response import Usage
from epp.labels import Selector

SATURATED = MetricsSnapshot(waiting_queue=10, kv_cache_usage=0.9, updated_at=NOW)
ADMITTER = """apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: probabilistic-admitter
- type: random-picker
- type: utilization-detector
  parameters: {queueDepthThreshold: 999999999, kvCacheUtilThreshold: 1.0}
- name: cost
  type: request-attribute-reporter
  parameters:
    attributes:
    - key: {name: x-gateway-inference-request-cost}
      expression: usage.prompt_tokens + usage.completion_tokens
      condition: has(usage.completion_tokens)
flowControl:
  saturationDetector: {pluginRef: utilization-detector}
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: random-picker
"""


def _harness() -> Harness:
    store = Datastore()
    pool = PoolSpec(
        name="pool", namespace="default", selector=Selector.from_match_labels({"a": "b"}), target_ports=(8000,)
    )
    store.set_pool(
        pool, [PodInfo(f"pod-{i}", "default", f"10.0.0.{i}", labels={"a": "b"}, ready=True) for i in range(2)]
    )
    for s in store.endpoints():
        s.metrics = SATURATED
    store.set_objective(ObjectiveSpec(name="batch", namespace="default", priority=-1))
    return Harness(store, config_text=ADMITTER)


async def test_an_admitter_denial_is_upstreams_500_and_protected_work_passes() -> None:
    harness = _harness()
    with pytest.raises(EppError) as denied:  # saturation 2.0: a sheddable request is certain to be shed
        await harness.decide(
            InferenceRequest(request_id="r", model="m", headers={"x-gateway-inference-objective": "batch"})
        )
    assert denied.value.code is ErrorCode.INTERNAL
    assert str(denied.value) == (
        "inference error: Internal - request cannot be admitted: inference error: ResourceExhausted - "
        "probabilistic-admitter: rejected, saturation=2.000 prob=1.00"
    )
    get = harness.metrics.registry.get_sample_value
    timed = {
        "extension_point": "Admission",
        "plugin_type": "probabilistic-admitter",
        "plugin_name": "probabilistic-admitter",
    }
    assert get("inference_extension_plugin_duration_seconds_count", timed) == 1
    decision = await harness.decide(InferenceRequest(request_id="r2", model="m"))
    assert decision.targets


async def test_a_complete_response_feeds_the_response_plugins_and_returns_their_metadata() -> None:
    harness = _harness()
    await harness.decide(InferenceRequest(request_id="r", model="m"))
    assert harness.ctx is not None
    metadata = harness.pipeline.response_complete(harness.ctx, Usage(3, 4, 0, 7), 200)
    assert metadata == {"envoy.lb": {"x-gateway-inference-request-cost": 7.0}}
    assert harness.pipeline.response_complete(harness.ctx, None, 200) == {}  # no usage: zeros, nothing reported
