"""The picker's own /metrics, and API server faults the picker must ride out."""

from __future__ import annotations

import json

import aiohttp
from harness import POOL, hermetic

from epp_sim.stack.extproc_client import (
    post_headers,
    request_body,
    request_headers,
    response_body,
    response_headers,
)
from epp_sim.waits import wait_until

FOOD_REVIEW = {
    "apiVersion": "inference.networking.x-k8s.io/v1alpha2",
    "kind": "InferenceModel",
    "metadata": {"name": "food-review", "namespace": "default"},
    "spec": {
        "modelName": "food-review",
        "criticality": "Sheddable",
        "poolRef": {"name": POOL},
        "targetModels": [{"name": "food-review-1", "weight": 100}],
    },
}


async def test_request_counters_token_histograms_and_pool_gauges_over_http() -> None:
    async with hermetic("v1alpha2", pods=2, objects=[FOOD_REVIEW]) as env:
        call = env.open()
        body = json.dumps({"model": "food-review", "prompt": "hi"}).encode()
        await call.send(request_headers(post_headers()), request_body(body))
        headers_answer, body_answer = await call.recv(2)
        rewritten = body_answer.request_body.response.body_mutation.streamed_response.body
        assert json.loads(rewritten)["model"] == "food-review-1"  # the target model goes upstream
        usage = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
        answer = {"object": "text_completion", "model": "food-review-1", "usage": usage}
        await call.send(
            response_headers({":status": "200", "content-type": "application/json"}),
            response_body(json.dumps(answer).encode(), eos=True),
        )
        _, back = await call.recv(2)
        client_body = back.response_body.response.body_mutation.streamed_response.body
        assert json.loads(client_body)["model"] == "food-review"  # rewritten back for the client
        await call.end()

        labels = {"model_name": "food-review", "target_model_name": "food-review-1"}
        assert env.sample("inference_objective_request_total", priority="-1", **labels) == 1
        assert env.sample("inference_model_request_total", **labels) == 1
        assert env.sample("inference_objective_input_tokens_sum", **labels) == 11
        assert env.sample("inference_objective_output_tokens_sum", **labels) == 7
        assert env.sample("inference_objective_request_duration_seconds_count", **labels) == 1

        async with (
            aiohttp.ClientSession() as session,
            session.get(f"http://127.0.0.1:{env.runtime.ports.metrics}/metrics") as resp,
        ):
            text = await resp.text()
        assert resp.status == 200
        assert f'inference_pool_ready_pods{{name="{POOL}"}} 2.0' in text
        assert (
            'inference_objective_request_total{model_name="food-review",priority="-1",'
            'target_model_name="food-review-1"} 1.0'
        ) in text
        assert "# HELP inference_objective_request_total [ALPHA]" in text


async def test_api_server_restart_dropped_watches_and_410_keep_routing() -> None:
    async with hermetic("v1", pods=3) as env:
        server = env.api.server
        assert server.drop_watches() > 0
        await env.kube.set_pod_ready("pod-0", env.sims[0].host, ready=False)
        await wait_until(lambda: env.addresses() == {env.hostport(1), env.hostport(2)}, timeout=10)

        server.store.compact()  # every watch resume now gets 410 Gone and must relist
        server.drop_watches()
        await env.kube.set_pod_ready("pod-0", env.sims[0].host, ready=True)
        await wait_until(lambda: len(env.addresses()) == 3, timeout=10)

        await server.stop()  # the API server goes away: the picker keeps serving what it knows
        for i in range(5):
            routed = await env.route({"model": "m", "prompt": f"p{i}"})
            assert routed.status == 200 and routed.endpoint in {env.hostport(i) for i in range(3)}
        assert env.runtime.ready
        await server.start()  # back, with the stored objects: the picker catches up
        await env.kube.delete("v1", "Pod", "pod-2")
        await wait_until(lambda: env.addresses() == {env.hostport(0), env.hostport(1)}, timeout=20)

        # A change lands while the picker cannot watch (API server down; written straight into its
        # store) and the history is compacted: the resumed watch gets 410 Gone, and the relists that
        # follow fail five times before one gets through.
        await server.stop()
        status = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        server.store.patch("Pod", "pod-1", status, namespace="default", subresource="status")
        server.store.compact()
        server.inject_error(500, verb="list", times=5)
        await server.start()
        await wait_until(lambda: env.addresses() == {env.hostport(0)}, timeout=30)
        assert not server.faults.errors  # all five list errors were hit on the way
