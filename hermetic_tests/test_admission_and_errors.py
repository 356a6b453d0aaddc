"""Criticality and error cases end to end: shedding, statuses and bodies, cancels, odd framing."""

from __future__ import annotations

import json

from harness import POOL, hermetic

from epp_sim.stack.extproc_client import post_headers, request_body, request_headers
from epp_sim.waits import wait_until

OBJECTIVES = [
    {
        "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
        "kind": "InferenceObjective",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"priority": priority, "poolRef": {"name": POOL}},
    }
    for name, priority in (("critical", 10), ("sheddable", -1))
]
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


async def test_sheddable_routed_while_one_pod_has_room_and_shed_when_all_saturated() -> None:
    async with hermetic("v1", pods=2, objects=OBJECTIVES, config_text=DETECTOR) as env:
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
        assert env.sample("inference_objective_request_error_total", model_name="m", target_model_name="m",
                          error_code="ResourceExhausted") == 1  # fmt: skip


async def test_error_statuses_and_bodies() -> None:
    async with hermetic("v1alpha2", pods=1, objects=[]) as env:
        bad_json = await env.route(b'{"model": "m", "prompt": ')
        assert bad_json.status == 400
        assert bad_json.error.startswith(b"inference error: BadRequest - error unmarshaling request bodyMap:")
        missing = await env.route({"prompt": "p"})
        assert (missing.status, missing.error) == (
            400,
            b"inference error: BadRequest - model not found in request body",
        )
        no_prompt = await env.route({"model": "m"})
        assert no_prompt.status == 400 and b"must have prompt field" in no_prompt.error
        no_messages = await env.route({"model": "m", "messages": []}, path="/v1/chat/completions")
        assert no_messages.status == 400 and b"must have valid messages field" in no_messages.error
        unknown = await env.route({"model": "nobody-serves-this", "prompt": "p"})
        assert unknown.status == 404
        assert unknown.error == (
            b"inference error: NotFound - error finding a model object in InferenceModel for input nobody-serves-this"
        )
        subset_miss = await env.route(
            {"model": "nobody-serves-this", "prompt": "p"}, subset=["10.9.9.9:8000"]
        )  # the model check comes first
        assert subset_miss.status == 404


async def test_subset_hint_empty_pool_and_chunked_body() -> None:
    async with hermetic("v1", pods=2) as env:
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

        for i in range(2):
            await env.kube.delete("v1", "Pod", f"pod-{i}")
        await wait_until(lambda: not env.endpoints(), timeout=10)
        empty = await env.route({"model": "m", "prompt": "p"})
        assert empty.status == 503


async def test_client_cancelling_mid_stream_leaves_nothing_behind() -> None:
    async with hermetic("v1", pods=1) as env:
        # Cancel while the body is still arriving.
        call = env.open()
        await call.send(request_headers(post_headers()), request_body(b'{"model": "m", ', eos=False))
        call.call.cancel()
        # Cancel after routing, before the response: the running gauge must come back to 0.
        call = env.open()
        await call.send(request_headers(post_headers()), request_body(b'{"model":"m","prompt":"p"}'))
        await call.recv(2)
        assert env.sample("inference_objective_running_requests", model_name="m") == 1
        call.call.cancel()
        await wait_until(lambda: env.sample("inference_objective_running_requests", model_name="m") == 0, timeout=5)
        # The picker still serves.
        assert (await env.route({"model": "m", "prompt": "p"})).status == 200
