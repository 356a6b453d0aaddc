"""The picker's own /metrics, and API server faults the picker must ride out."""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest
from pool_modes import ALL_MODES, POOL, served

from epp_sim.kube_objects import PoolMode, inference_model, inference_objective, model_rewrite
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.extproc_client import (
    post_headers,
    request_body,
    request_headers,
    response_body,
    response_headers,
)
from epp_sim.waits import wait_until


def food_review(mode: PoolMode) -> tuple[list[dict[str, Any]], dict[str, str], str]:
    """Each mode's way to send ``food-review`` to ``food-review-1`` as sheddable work: objects, headers, priority."""
    if mode == "v1alpha2":
        model = inference_model("food-review", POOL, criticality="Sheddable", targets={"food-review-1": 100})
        return [model], {}, "-1"
    if mode == "v1":
        rewrite = model_rewrite("food", POOL, {"food-review-1": 1}, model="food-review")
        return [rewrite, inference_objective("batch", -1, POOL)], {"x-gateway-inference-objective": "batch"}, "-1"
    return [], {"x-gateway-model-name-rewrite": "food-review-1"}, "0"  # standalone: a route's header, no CRDs


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_request_counters_token_histograms_and_pool_gauges_over_http(
    epp_pool: PoolFactory, mode: PoolMode
) -> None:
    objects, headers, priority = food_review(mode)
    env = await epp_pool(mode, pods=2, objects=objects)
    call = env.client.open()
    body = json.dumps({"model": "food-review", "prompt": "hi"}).encode()
    await call.send(request_headers(post_headers(**headers)), request_body(body))
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
    assert env.sample("inference_objective_request_total", priority=priority, **labels) == 1
    assert env.sample("inference_model_request_total", **labels) == 1
    assert env.sample("inference_objective_input_tokens_sum", **labels) == 11
    assert env.sample("inference_objective_output_tokens_sum", **labels) == 7
    assert env.sample("inference_objective_request_duration_seconds_count", **labels) == 1

    async with aiohttp.ClientSession() as session, session.get(env.picker.metrics_url) as resp:
        text = await resp.text()
    assert resp.status == 200
    assert f'inference_pool_ready_pods{{name="{env.pool.reported_name}"}} 2.0' in text
    assert (
        'inference_objective_request_total{model_name="food-review",'
        f'priority="{priority}",target_model_name="food-review-1"}} 1.0'
    ) in text
    assert "# HELP inference_objective_request_total [ALPHA]" in text


@pytest.mark.parametrize("mode", ALL_MODES)
async def test_api_server_restart_dropped_watches_and_410_keep_routing(epp_pool: PoolFactory, mode: PoolMode) -> None:
    env = await epp_pool(mode, pods=3, objects=served(mode, "m"))
    server, cluster, pods = env.cluster.server, env.cluster, env.pods
    assert server.drop_watches() > 0
    await cluster.set_pod_ready(pods[0].name, pods[0].ip, ready=False)
    await env.wait_for_addresses({env.hostport(1), env.hostport(2)})

    server.store.compact()  # every watch resume now gets 410 Gone and must relist
    server.drop_watches()
    await cluster.set_pod_ready(pods[0].name, pods[0].ip, ready=True)
    await wait_until(lambda: len(env.addresses()) == 3, timeout=10)

    await server.stop()  # the API server goes away: the picker keeps serving what it knows
    for i in range(5):
        routed = await env.route({"model": "m", "prompt": f"p{i}"})
        assert routed.status == 200 and routed.endpoint in {env.hostport(i) for i in range(3)}
    assert env.runtime.ready
    await server.start()  # back, with the stored objects: the picker catches up
    await cluster.delete("v1", "Pod", pods[2].name)
    await env.wait_for_addresses({env.hostport(0), env.hostport(1)}, timeout=20)

    # A change lands while the picker cannot watch (API server down; written straight into its
    # store) and the history is compacted: the resumed watch gets 410 Gone, and the relists that
    # follow fail three times before one gets through.
    await server.stop()
    status = {"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    server.store.patch("Pod", pods[1].name, status, namespace="default", subresource="status")
    server.store.compact()
    server.inject_error(500, verb="list", times=3)
    await server.start()
    await env.wait_for_addresses({env.hostport(0)}, timeout=30)
    assert not server.faults.errors  # all three list errors were hit on the way
