"""In-flight load: counted from routing to the stream's end through the real stream and pool pipeline."""

from __future__ import annotations

import asyncio
import random

import pytest
from pool_harness import Harness
from scheduling_builders import NOW
from test_pipeline import make_store

from epp.clock import ManualClock
from epp.datalayer.pool_gauges import PoolGauges
from epp.errors import EppError
from epp.extproc.processor import Processor, StreamOptions
from epp.extproc.stream import Stream
from epp.framework.request import ApiKind, InferenceRequest
from epp.plugins.inflight_load import InFlightLoadProducer
from epp.requestcontrol.pools import PoolPipelines
from epp_sim.stack.extproc_client import post_headers, request_body, request_headers, response_body, response_headers

CHAT = b'{"model":"m","max_tokens":64,"messages":[{"role":"user","content":"' + b"x" * 400 + b'"}],"stream":true}'
SSE = b'data: {"object":"chat.completion.chunk","choices":[]}\n\n'


def _messages(body: bytes, path: str) -> list[object]:
    return [
        request_headers(post_headers(path)),
        request_body(body),
        response_headers({":status": "200", "content-type": "text/event-stream"}),
        response_body(SSE),
        response_body(b"data: [DONE]\n\n", eos=True),
    ]


async def test_counts_return_to_zero_after_10k_requests_with_random_cancels() -> None:
    # Streams set the request-id ContextVar; a task runs them in a copy so it does not outlive the test.
    await asyncio.create_task(_ten_thousand_requests())


async def _ten_thousand_requests() -> None:
    harness = Harness(make_store(4))
    processor = Processor(PoolPipelines({("default", "pool"): harness.routing}), harness.metrics, StreamOptions())
    rng = random.Random(17)
    bodies = [(CHAT, "/v1/chat/completions")] * 8 + [
        (b'{"model":"m","max_tokens":9,"messages":[{"role":"user","content":"hi"}]}', "/v1/messages"),
        (b'{"model":"m","messages":[]}', "/v1/messages"),  # 400: never routed
    ]
    open_streams: list[Stream] = []
    peak = 0
    for _ in range(10_000):
        stream = Stream(processor)
        body, path = rng.choice(bodies)
        messages = _messages(body, path)
        try:
            for message in messages[: rng.randint(1, len(messages))]:  # a random point to stop at (or the end)
                await stream.handle(message)  # type: ignore[arg-type]
        except EppError:
            pass
        open_streams.append(stream)
        if len(open_streams) > 40 or rng.random() < 0.5:  # streams end in random order, some much later
            open_streams.pop(rng.randrange(len(open_streams))).close()
        peak = max(peak, sum(s.in_flight_requests for s in harness.store.endpoints()))
    assert peak > 4  # requests really were in flight together
    for stream in open_streams:
        stream.close()
    for state in harness.store.endpoints():
        assert (state.in_flight_requests, state.in_flight_tokens) == (0, 0), state


async def test_gauges_show_the_counts_per_endpoint() -> None:
    harness = Harness(make_store(2))
    gauges = PoolGauges(harness.store, harness.metrics, ManualClock(start=NOW))
    request = InferenceRequest(request_id="r", model="m", size=4_000, api=ApiKind.CHAT_COMPLETIONS)
    decision = await harness.decide(request)
    gauges.refresh()
    pod = decision.targets[0].endpoint.name
    sample = harness.metrics.registry.get_sample_value
    assert sample("llm_d_epp_inflight_requests", {"endpoint_name": pod, "namespace": "default"}) == 1
    assert sample("llm_d_epp_inflight_tokens", {"endpoint_name": pod, "namespace": "default"}) == 1_000
    assert harness.ctx is not None
    harness.finished(harness.ctx, completed=False)
    gauges.refresh()
    assert sample("llm_d_epp_inflight_requests", {"endpoint_name": pod, "namespace": "default"}) == 0


ACTIVE_ONLY = """
apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: active-request-scorer
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{pluginRef: active-request-scorer}, {pluginRef: max-score-picker}]
"""


async def test_a_burst_spreads_before_any_scrape_shows_it() -> None:
    harness = Harness(make_store(4), config_text=ACTIVE_ONLY)
    for i in range(8):
        await harness.decide(InferenceRequest(request_id=str(i), model="m", size=100))
    assert sorted(s.in_flight_requests for s in harness.store.endpoints()) == [2, 2, 2, 2]


@pytest.mark.parametrize(
    ("producer", "size", "cap", "tokens"),
    [
        (InFlightLoadProducer(), 4_000, 50, 1_000),  # input only by default
        (InFlightLoadProducer(add_output=True), 4_000, None, 2_500),  # ratio 1.5
        (InFlightLoadProducer(add_output=True), 4_000, 50, 1_050),  # the client's cap
        (InFlightLoadProducer(add_output=True, max_output=10), 4_000, 50, 1_010),  # the operator's cap
        (InFlightLoadProducer(add_output=True), 3, 50, 0),  # nothing to estimate from
    ],
)
def test_token_estimate(producer: InFlightLoadProducer, size: int, cap: int | None, tokens: int) -> None:
    request = InferenceRequest(request_id="r", size=size, max_output_tokens=cap)
    assert producer.estimate_tokens(request) == tokens


async def test_the_configured_producer_sets_the_estimate() -> None:
    producer = (
        "- type: inflight-load-producer\n  parameters: {addEstimatedOutputTokens: true, maxEstimatedOutputTokens: 7}\n"
    )
    text = ACTIVE_ONLY.replace("- type: max-score-picker\n", "- type: max-score-picker\n" + producer)
    harness = Harness(make_store(1), config_text=text)
    request = InferenceRequest(request_id="r", model="m", size=400)
    await harness.decide(request)
    assert request.in_flight_tokens == 107
