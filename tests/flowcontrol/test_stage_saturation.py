"""Stage-aware saturation: a pool of prefill and decode pods is as saturated as its busier stage.

As the llm-d router's flow control (``partitionEndpoints``): prefill pods and decode pods are asked
about separately, interleaved pods count in both stages, encode-only pods and unknown roles in
neither; the queue gates on the larger; each stage's value is a gauge of its own, gone when no pod
serves the stage. Admission without flow control sheds on the same value.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

import pytest

from epp.clock import ManualClock
from epp.config.loader import load_config
from epp.flowcontrol.controller import FlowController
from epp.framework.endpoint import Endpoint, EndpointState, MetricsSnapshot
from epp.framework.plugin import PluginContext, PluginRegistry, TypedName
from epp.framework.request import InferenceRequest
from epp.framework.roles import ROLE_LABEL
from epp.framework.saturation import StageSaturation, stage_saturation
from epp.plugins import register_in_tree
from epp.plugins.utilization_detector import create as utilization_detector
from epp.requestcontrol.admission import SaturationAdmission
from epp.telemetry.metrics import EppMetrics

NOW = 1000.0
DETECTOR = utilization_detector("u", {"metricsStalenessThreshold": "1000h"}, PluginContext())


def pod(i: int, role: str | None, queue: int) -> EndpointState:
    labels = {} if role is None else {ROLE_LABEL: role}
    endpoint = Endpoint("default", f"pod-{i}-rank-0", f"pod-{i}", f"10.0.0.{i}", 8000, labels=labels)
    return EndpointState(endpoint, MetricsSnapshot(waiting_queue=queue, updated_at=NOW))


def read(endpoints: Sequence[EndpointState]) -> float:
    return DETECTOR.saturation(endpoints, NOW)


def test_the_busier_stage_decides() -> None:
    # queueDepthThreshold 5: a queue of 5 is utilisation 1.0; the detector averages within a stage.
    pods = [pod(0, "prefill", 5), pod(1, "prefill", 5), pod(2, "decode", 0), pod(3, "decode", 1)]
    assert stage_saturation(read, pods) == StageSaturation(1.0, prefill=1.0, decode=0.1)
    assert DETECTOR.saturation(pods, NOW) == pytest.approx(0.55)  # the whole pool's average hides it


def test_interleaved_encode_and_unlabelled_pods() -> None:
    pods = [pod(0, "prefill-decode", 5), pod(1, "decode", 0), pod(2, "encode", 5), pod(3, "bogus", 5)]
    assert stage_saturation(read, pods) == StageSaturation(1.0, prefill=1.0, decode=0.5)
    plain = [pod(0, None, 5), pod(1, None, 0)]  # an aggregated pool: all decode, read whole
    assert stage_saturation(read, plain) == StageSaturation(0.5, decode=0.5)
    encoders = [pod(0, "encode", 0), pod(1, "encode", 5)]  # no stage served: the whole pool
    assert stage_saturation(read, encoders) == StageSaturation(0.5)


def test_admission_sheds_on_the_busier_stage() -> None:
    admission = SaturationAdmission(DETECTOR, ManualClock(NOW))
    sheddable = InferenceRequest("r", priority=-1)
    pods = [pod(0, "prefill", 5), pod(1, "decode", 0), pod(2, "decode", 0), pod(3, "decode", 0)]
    failures: list[tuple[str, str]] = []

    def failed(point: str, plugin: TypedName, reason: str, detail: str, exc: BaseException | None) -> None:
        failures.append((point, reason))

    _, refusal = admission.verdict(sheddable, pods, failed)
    assert refusal is not None and refusal.code.http_status == 429
    assert admission.verdict(InferenceRequest("r", priority=0), pods, failed)[1] is None  # only sheddable work is shed
    assert failures == []


class _Raising:
    typed_name = TypedName("broken-detector", "broken")

    def saturation(self, candidates: Sequence[EndpointState], now: float) -> float:
        raise RuntimeError("no data")


def test_a_failing_detector_admits_and_is_reported_once_per_stage() -> None:
    admission = SaturationAdmission(_Raising(), ManualClock(NOW))
    failures: list[tuple[str, str]] = []

    def failed(point: str, plugin: TypedName, reason: str, detail: str, exc: BaseException | None) -> None:
        failures.append((point, str(plugin)))

    pods = [pod(0, "prefill", 5), pod(1, "decode", 0)]
    assert admission.verdict(InferenceRequest("r", priority=-1), pods, failed)[1] is None  # fail open
    assert failures == [("SaturationDetector", "broken/broken-detector")] * 2  # the prefill and the decode read


@pytest.fixture
async def controller() -> AsyncIterator[tuple[FlowController, list[EndpointState], EppMetrics]]:
    registry = PluginRegistry()
    register_in_tree(registry)
    text = (
        "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nfeatureGates: [flowControl]\n"
        "plugins:\n- type: utilization-detector\n  parameters: {metricsStalenessThreshold: 1000h}\n"
        "flowControl:\n  defaultRequestTTL: 0s\n"
    )
    clock = ManualClock(NOW)
    config = load_config(text, registry, PluginContext(clock=clock))
    assert config.flow_control is not None
    endpoints: list[EndpointState] = []
    metrics = EppMetrics()
    fc = FlowController(
        config.flow_control,
        pool_name="pool",
        endpoints=lambda: endpoints,
        detector=lambda: config.saturation_detector,
        clock=clock,
        metrics=metrics,
    )
    await fc.start()
    yield fc, endpoints, metrics
    await fc.stop()


async def test_the_queue_gates_on_the_busier_stage_and_reports_each(
    controller: tuple[FlowController, list[EndpointState], EppMetrics],
) -> None:
    fc, endpoints, metrics = controller
    endpoints[:] = [pod(0, "prefill", 5), pod(1, "decode", 0), pod(2, "decode", 0)]
    item = fc.enqueue(InferenceRequest("r1", model="m", target_model="m"))
    assert not item.future.done()  # the prefill stage is saturated, though two of three pods are idle

    def sample(stage: str) -> float | None:
        return metrics.registry.get_sample_value(
            "llm_d_epp_flow_control_pool_saturation", {"inference_pool": "pool", "stage": stage}
        )

    assert (sample("prefill"), sample("decode"), sample("effective")) == (1.0, 0.0, 1.0)
    gie = metrics.registry.get_sample_value(
        "inference_extension_flow_control_pool_saturation", {"inference_pool": "pool"}
    )
    assert gie == 1.0  # GIE's series has no stage: the value that gates

    endpoints[:] = [pod(1, "decode", 0), pod(2, "decode", 0)]  # the prefill pods are gone
    fc.cycle()
    assert item.future.done() and item.future.exception() is None
    fc.enqueue(InferenceRequest("r2", model="m", target_model="m"))  # dispatched at once: runs a cycle
    endpoints[:] = [pod(1, "decode", 5)]
    blocked = fc.enqueue(InferenceRequest("r3", model="m", target_model="m"))
    assert not blocked.future.done()
    assert sample("prefill") is None and sample("decode") == 1.0
    await fc.stop()
    assert blocked.future.exception() is not None  # shutting down: 503
