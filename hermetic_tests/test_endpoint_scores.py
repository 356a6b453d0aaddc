"""``--emit-endpoint-scores``: the scheduler's weighted score of every candidate, in the ``envoy.lb`` metadata.

Upstream (llm-d router ``handlers/request.go``) puts a struct under the
``x-gateway-destination-endpoint-scores`` key of the ``envoy.lb`` namespace, beside the
destination: each candidate's ``ip:port`` → the primary profile's weighted score (a number).
Without the flag the key is absent.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pool_modes import ALL_MODES, served

from epp.extproc import pb
from epp_sim.kube_objects import PoolMode
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.extproc_client import post_headers, protocol, request_body, request_headers
from epp_sim.stack.hermetic import HermeticPool

QUEUE_ONLY = """\
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
"""
QUEUES = [{"waiting": 0}, {"waiting": 5}, {"waiting": 10}]  # queue-scorer: 1, 0.5, 0; weighted ×2
BODY = json.dumps({"model": "m", "prompt": "hello"}).encode()


async def _lb_metadata(env: HermeticPool, *, buffered: bool = False) -> Any:
    """The ``envoy.lb`` struct of the answer that routes (request headers, or the body in BUFFERED)."""
    call = env.client.open()
    if buffered:
        await call.send(request_headers(post_headers(), config=protocol(pb.BODY_BUFFERED)))
        await call.recv_one()  # the headers ack
        await call.send(request_body(BODY))
    else:
        await call.send(request_headers(post_headers()), request_body(BODY))
    answer = await call.recv_one()
    await call.call.done_writing()
    call.call.cancel()
    return answer.dynamic_metadata.fields["envoy.lb"].struct_value.fields


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_scores_of_every_candidate_ride_beside_the_destination(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(
        mode, pods=3, objects=served(mode, "m"), picker_args=["--emit-endpoint-scores", "--config-text", QUEUE_ONLY]
    )
    await env.set_pins(QUEUES)
    expected = {env.hostport(0): 2.0, env.hostport(1): 1.0, env.hostport(2): 0.0}
    for buffered in (False, True):
        lb = await _lb_metadata(env, buffered=buffered)
        assert lb["x-gateway-destination-endpoint"].string_value == env.hostport(0)
        scores = lb["x-gateway-destination-endpoint-scores"].struct_value.fields
        assert {hostport: value.number_value for hostport, value in scores.items()} == expected


async def test_no_scores_without_the_flag(epp_pool: PoolFactory) -> None:
    env = await epp_pool("v1", pods=2, picker_args=["--config-text", QUEUE_ONLY])
    await env.set_pins(QUEUES[:2])
    lb = await _lb_metadata(env)
    assert set(lb) == {"x-gateway-destination-endpoint"}
