"""Criticality and error cases end to end: shedding, statuses and bodies, cancels, odd framing."""

from __future__ import annotations

import json

import pytest
from pool_modes import ALL_MODES, CRD_MODES, POOL, served

from epp_sim.kube_objects import PoolMode, inference_objective
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.extproc_client import post_headers, request_body, request_headers
from epp_sim.waits import wait_until

# Staleness is judged at 2 s here (default 200 ms) so a loaded CI machine cannot make a pod look stale.
DETECTOR = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: utilization-detector
  parameters: {metricsStalenessThreshold: 2s}
schedulingProfiles:
- name: default
  plugins:
  - {pluginRef: queue-scorer, weight: 2}
  - {pluginRef: kv-cache-utilization-scorer, weight: 2}
saturationDetector: {pluginRef: utilization-detector}
"""
SATURATED = {"waiting": 6, "kv_cache_usage": 0.5}
FREE = {"waiting": 0, "kv_cache_usage": 0.1}


def objective(name: str) -> dict[str, str]:
    return {"x-gateway-inference-objective": name}


@pytest.mark.parametrize("mode", CRD_MODES)  # sheddable work is named by an InferenceObjective
async def test_sheddable_routed_while_one_pod_has_room_and_shed_when_all_saturated(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    objects = [
        inference_objective("critical", 10, POOL, mode=mode),
        inference_objective("sheddable", -1, POOL, mode=mode),
        *served(mode, "m"),
    ]
    env = await epp_pool(mode, pods=2, objects=objects, picker_args=["--config-text", DETECTOR])
    await env.set_pins([SATURATED, FREE])
    routed = await env.route({"model": "m", "prompt": "p"}, headers=objective("sheddable"))
    assert routed.endpoint == env.hostport(1)

    await env.set_pins([SATURATED, {"waiting": 0, "kv_cache_usage": 0.85}])
    shed = await env.route({"model": "m", "prompt": "p"}, headers=objective("sheddable"))
    assert shed.status == 429
    assert shed.error == b"inference error: ResourceExhausted - system saturated, sheddable request dropped"

    critical = await env.route({"model": "m", "prompt": "p"}, headers=objective("critical"))
    assert critical.status == 200
    standard = await env.route({"model": "m", "prompt": "p"})  # no objective: priority 0, never shed
    assert standard.status == 200
    labels = {"model_name": "m", "target_model_name": "m", "error_code": "ResourceExhausted"}
    assert env.sample("inference_objective_request_error_total", **labels) == 1


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_error_statuses_and_bodies(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=1)
    bad_json = await env.route(b'{"model": "m", "prompt": ')
    assert bad_json.status == 400
    assert bad_json.error.startswith(b"inference error: BadRequest - error unmarshaling request bodyMap:")
    missing = await env.route({"prompt": "p"})
    assert (missing.status, missing.error) == (400, b"inference error: BadRequest - model not found in request body")
    no_prompt = await env.route({"model": "m"})
    assert no_prompt.status == 400 and b"must have prompt field" in no_prompt.error
    no_messages = await env.route({"model": "m", "messages": []}, path="/v1/chat/completions")
    assert no_messages.status == 400 and b"must have valid messages field" in no_messages.error

    unknown = await env.route({"model": "nobody-serves-this", "prompt": "p"})
    if mode != "v1alpha2":
        assert unknown.status == 200  # v1 pools and standalone mode accept any model
        return
    assert unknown.status == 404
    assert unknown.error == (
        b"inference error: NotFound - error finding a model object in InferenceModel for input nobody-serves-this"
    )
    subset_miss = await env.route({"model": "nobody-serves-this", "prompt": "p"}, subset=["10.9.9.9:8000"])
    assert subset_miss.status == 404  # the model check comes first


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_subset_hint_empty_pool_and_chunked_body(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=2, objects=served(mode, "m"))
    only_second = await env.route({"model": "m", "prompt": "p"}, subset=[env.hostport(1)])
    assert only_second.endpoint == env.hostport(1)
    nothing = await env.route({"model": "m", "prompt": "p"}, subset=["10.9.9.9:8000"])
    assert nothing.status == 503
    assert nothing.error == (
        b"inference error: ServiceUnavailable - failed to find endpoint candidates for serving the request"
    )
    big = {"model": "m", "prompt": "x" * 300_000}
    raw = json.dumps(big).encode()
    routed = await env.route(big, chunks=40)
    assert routed.status == 200 and routed.body == raw
    assert routed.headers["Content-Length"] == str(len(raw)).encode()

    for pod in env.pods:
        await env.cluster.delete("v1", "Pod", pod.name)
    await wait_until(lambda: not env.endpoints(), timeout=10)
    empty = await env.route({"model": "m", "prompt": "p"})
    assert empty.status == 503


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_client_cancelling_mid_stream_leaves_nothing_behind(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=1, objects=served(mode, "m"))
    # Cancel while the body is still arriving.
    call = env.client.open()
    await call.send(request_headers(post_headers()), request_body(b'{"model": "m", ', eos=False))
    call.call.cancel()
    # Cancel after routing, before the response: the running gauge must come back to 0.
    call = env.client.open()
    await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"p"}'))
    await call.recv(2)
    assert env.sample("inference_objective_running_requests", model_name="m") == 1
    call.call.cancel()
    await wait_until(lambda: env.sample("inference_objective_running_requests", model_name="m") == 0, timeout=5)
    # The picker still serves.
    assert (await env.route({"model": "m", "prompt": "p"})).status == 200
