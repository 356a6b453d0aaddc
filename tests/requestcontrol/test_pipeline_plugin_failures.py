"""Plugins around the scheduling cycle that fail: a saturation detector, a data producer, an admitter, a parser,
a response plugin, a request-header processor.

Each is contained as docs/plugins.md says: the detector's and the admitter's request is admitted (fail
open), the producer's is scheduled without its data, the parser's gets 500 naming the parser, the
response plugin's response goes on; each failure counts in ``epp_plugin_errors_total`` when served,
and only shows in the record when explained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from pool_harness import Harness
from test_pipeline import make_store

from epp.datastore.types import ObjectiveSpec
from epp.errors import EppError, ErrorCode
from epp.framework.admission import Denial
from epp.framework.endpoint import EndpointState
from epp.framework.parsing import ParsedBody
from epp.framework.plugin import NamedPlugin, PluginContext, PluginKind, PluginRegistry, TypedName
from epp.framework.request import ApiKind, InferenceRequest
from epp.framework.response import CompletedResponse, Usage
from epp.plugins import register_in_tree
from epp.requestcontrol.admission import Admission
from epp.requestcontrol.recorder import ExplainRecorder
from epp.scheduling.trace import PluginFailure

HEADER = "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"


class BrokenDetector(NamedPlugin):
    plugin_type = "broken-detector"
    kinds = frozenset({PluginKind.SATURATION_DETECTOR})

    def saturation(self, candidates: Sequence[EndpointState], now: float) -> float:
        raise ZeroDivisionError("no capacity known")


class BrokenProducer(NamedPlugin):
    plugin_type = "broken-producer"
    kinds = frozenset({PluginKind.DATA_PRODUCER})

    async def produce(self, request: InferenceRequest) -> None:
        raise ConnectionError("tokenizer gone")


class BrokenAdmitter(NamedPlugin):
    plugin_type = "broken-admitter"
    kinds = frozenset({PluginKind.ADMITTER})

    def admit(self, request: InferenceRequest, candidates: Sequence[EndpointState]) -> Denial | None:
        raise KeyError("tenant")


class BrokenHeaderProcessor(NamedPlugin):
    plugin_type = "broken-header-processor"
    kinds = frozenset({PluginKind.REQUEST_HEADER})

    def request_header(self, request: InferenceRequest) -> None:
        raise UnicodeError("session header")


class BrokenResponse(NamedPlugin):
    plugin_type = "broken-response"
    kinds = frozenset({PluginKind.RESPONSE_STREAMING})

    def response_complete(self, request: InferenceRequest, response: CompletedResponse) -> None:
        raise ValueError("no usage")


class BrokenParser(NamedPlugin):
    plugin_type = "broken-parser"
    kinds = frozenset({PluginKind.PARSER})
    claims = (("completions", ApiKind.COMPLETIONS),)
    fallback_api = ApiKind.PASSTHROUGH

    def parse(self, raw: bytes, api: ApiKind) -> ParsedBody:
        raise AttributeError("'NoneType' object has no attribute 'get'")

    def with_model(self, parsed: ParsedBody, model: str) -> bytes | None:
        return None


def harness(text: str) -> Harness:
    registry = PluginRegistry()
    register_in_tree(registry)
    for plugin in (BrokenDetector, BrokenProducer, BrokenAdmitter, BrokenResponse, BrokenParser, BrokenHeaderProcessor):

        def factory(name: str, parameters: Mapping[str, Any], context: PluginContext, cls: Any = plugin) -> Any:
            return cls(name)

        registry.register(plugin.plugin_type, factory)
    return Harness(make_store(2), config_text=HEADER + text, registry=registry)


def errors(h: Harness, point: str, plugin_type: str) -> float | None:
    labels = {"extension_point": point, "plugin_type": plugin_type, "plugin_name": plugin_type, "reason": "exception"}
    return h.metrics.registry.get_sample_value("epp_plugin_errors_total", labels)


async def test_a_failing_saturation_detector_admits_sheddable_work() -> None:
    h = harness(
        "plugins: [{type: queue-scorer}, {type: broken-detector}]\n"
        "flowControl: {saturationDetector: {pluginRef: broken-detector}}\n"
    )
    h.store.set_objective(ObjectiveSpec(name="batch", namespace="default", priority=-1))
    batch = {"x-gateway-inference-objective": "batch"}
    explain = ExplainRecorder(InferenceRequest(request_id="x", model="m", headers=batch))
    await h.pipeline.route(h.pipeline.context(explain.explanation.request, None, explain))  # recorded, not counted
    assert explain.explanation.request.priority == -1 and explain.explanation.admission is Admission.ADMITTED
    assert explain.explanation.scheduling.failures == [
        PluginFailure(
            "SaturationDetector",
            TypedName("broken-detector", "broken-detector"),
            "exception",
            "ZeroDivisionError: no capacity known",
        )
    ]
    assert errors(h, "SaturationDetector", "broken-detector") is None
    decision = await h.decide(InferenceRequest(request_id="r", model="m", headers=batch))
    assert decision.targets  # admitted: the detector's failure does not shed it
    assert errors(h, "SaturationDetector", "broken-detector") == 1


async def test_a_failing_data_producer_leaves_the_request_without_its_data() -> None:
    h = harness("plugins: [{type: queue-scorer}, {type: broken-producer}]\n")
    await h.route()
    assert h.last is not None and h.last.targets
    assert errors(h, "PrepareData", "broken-producer") == 1


async def test_a_failing_admitter_admits_and_a_failing_response_plugin_is_ignored() -> None:
    h = harness("plugins: [{type: queue-scorer}, {type: broken-admitter}, {type: broken-response}]\n")
    await h.route()
    assert h.last is not None and h.last.targets and h.ctx is not None
    assert errors(h, "Admission", "broken-admitter") == 1
    assert h.pipeline.response_complete(h.ctx, Usage(prompt_tokens=3), 200) == {}
    assert errors(h, "ResponseStreaming", "broken-response") == 1


async def test_a_failing_request_header_processor_is_skipped_and_counted() -> None:
    h = harness("plugins: [{type: queue-scorer}, {type: broken-header-processor}]\n")
    request = await h.route(x_llm_d_inference_fairness_id="tenant-a")
    assert h.last is not None and h.last.targets
    assert request.fairness_id == "tenant-a"  # the flow is still resolved
    assert errors(h, "RequestHeaderProcessor", "broken-header-processor") == 1


async def test_a_parser_that_raises_answers_500_naming_it() -> None:
    h = harness(
        "plugins: [{type: queue-scorer}, {type: broken-parser}]\n"
        "requestHandler: {parsers: [{pluginRef: broken-parser}]}\n"
    )
    request = InferenceRequest(request_id="r", headers={":path": "/v1/completions"})
    with pytest.raises(EppError) as err:
        h.pipeline.parse(request, b'{"model": "m", "prompt": "hi"}', None)
    assert err.value.code is ErrorCode.INTERNAL
    assert err.value.msg == (
        "parser broken-parser/broken-parser failed: AttributeError: 'NoneType' object has no attribute 'get'"
    )
    assert errors(h, "Parser", "broken-parser") == 1
