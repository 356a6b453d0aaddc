"""SLO-aware routing through the real Envoy: the objective headers decide, sheddable work that no endpoint can
serve in time is refused as upstream refuses it, the scorer falls back to load without a model, and the
embedded predictor learns from the responses Envoy relays, training off the event loop."""

from __future__ import annotations

import io
import json
import random
from pathlib import Path
from typing import Any

import aiohttp
import grpc
from pool_modes import POOL, served

from epp.api import pb
from epp.api.explain_command import render
from epp.slo.embedded import EmbeddedPredictor, EmbeddedSettings
from epp.slo.features import Features, Sample
from epp_sim.kube_objects import inference_objective
from epp_sim.latency_predictor import LatencyPredictorServer
from epp_sim.modelserver import SimConfig
from epp_sim.pytest_plugin import PoolFactory
from epp_sim.stack.hermetic import HermeticPool
from epp_sim.waits import wait_until

PRODUCER = "predicted-latency-producer"
CONFIG = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters:
    predictor: {{embedded: {{retrainInterval: 200ms, minSamplesForRetrain: 5{state}}}}}
- type: slo-headroom-tier-filter
  parameters: {{epsilonExploreNeg: 0}}
- type: latency-scorer
- type: latency-slo-admitter
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins: [{{pluginRef: slo-headroom-tier-filter}}, {{pluginRef: latency-scorer}}, {{pluginRef: max-score-picker}}]
"""
REFUSED = b"inference error: Internal - request cannot be admitted: no valid endpoint available to serve the request"
MODEL = SimConfig().model
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}


async def _trained_state(path: Path) -> None:
    """A model that learnt TTFT = 20 ms + 40 ms per waiting request (the picker loads it at start)."""
    rng = random.Random(5)
    predictor = EmbeddedPredictor(EmbeddedSettings(retrain_interval=3600, state_file=str(path)), seed=5)
    for _ in range(3000):
        waiting = rng.randint(0, 10)
        features = Features(rng.random(), rng.randint(1, 200), waiting, rng.randint(0, 4), 0.0, rng.randint(0, 800))
        predictor.observe(Sample(features, (20 + 40 * waiting) * rng.uniform(0.95, 1.05), 0.0))
    assert await predictor.train_now()
    await predictor.aclose()


def _producer(env: HermeticPool):  # type: ignore[no-untyped-def]
    return env.runtime.pools[0].routing.config.plugins[PRODUCER]


async def _explain(env: HermeticPool, headers: dict[str, str]) -> Any:
    async with grpc.aio.insecure_channel(env.picker.health_target) as channel:
        request = pb.ExplainRequest(
            headers={":path": "/v1/chat/completions", **headers}, body=json.dumps(CHAT).encode()
        )
        return await pb.ExplainStub(channel).Explain(request, timeout=10)


async def _served_by(env: HermeticPool, http: aiohttp.ClientSession, headers: dict[str, str]) -> int:
    before = [pod.server.stats()["requests"] for pod in env.pods]
    async with http.post(f"{env.envoy_url}/v1/chat/completions", json=CHAT, headers=headers) as resp:
        assert resp.status == 200, await resp.text()
        await resp.read()
    after = [pod.server.stats()["requests"] for pod in env.pods]
    (pod,) = [i for i, (a, b) in enumerate(zip(before, after, strict=True)) if b > a]
    return pod


async def test_slo_headers_admission_and_learning_through_envoy(epp_pool: PoolFactory, tmp_path: Path) -> None:
    state = tmp_path / "predictor.npz"
    await _trained_state(state)
    config = CONFIG.format(state=f", stateFile: {state}")
    objects = [inference_objective("batch", -1, POOL), *served("v1", MODEL)]
    env = await epp_pool("v1", pods=2, objects=objects, picker_args=["--config-text", config], envoy=True)
    predictor = _producer(env).predictor
    await env.set_pins(
        [{"waiting": 4, "running": 3, "kv_cache_usage": 0.5}, {"waiting": 0, "running": 3, "kv_cache_usage": 0.5}]
    )
    async with aiohttp.ClientSession() as http:
        await _served_by(env, http, {})  # the first use loads the saved model, off the loop
        await wait_until(lambda: predictor.stats.model_ready, timeout=20, message="the saved model loaded")
        # Headers honoured: only the idle pod is predicted under 100 ms (pod 0: ~180 ms), in either spelling.
        assert await _served_by(env, http, {"x-llm-d-slo-ttft-ms": "100"}) == 1
        assert await _served_by(env, http, {"x-slo-ttft-ms": "100"}) == 1
        # Explain shows the predictions, the objectives and the headroom per endpoint.
        answer = await _explain(env, {"x-llm-d-slo-ttft-ms": "100"})
        (latency,) = answer.latency
        assert (latency.producer, latency.ttft_slo_ms, latency.tpot_slo_ms) == (PRODUCER, 100.0, 0.0)
        by_address = {e.address: e for e in latency.endpoints}
        queued, idle = by_address[env.hostport(0)], by_address[env.hostport(1)]
        assert queued.ttft_ms > 150 and idle.ttft_ms < 100
        assert queued.ttft_headroom_ms < 0 < idle.ttft_headroom_ms and idle.valid and not queued.valid
        assert list(answer.picked) == [env.hostport(1)]
        text = io.StringIO()
        render(answer, text)
        assert f"latency ({PRODUCER}): SLO TTFT 100 ms, TPOT none" in text.getvalue()
        # Both meet 1 s: `least` packs the request onto the pod closest to its objective.
        assert await _served_by(env, http, {"x-llm-d-slo-ttft-ms": "1000"}) == 0

        # Admission: sheddable work no pod can serve within 5 ms is refused as upstream refuses it ...
        sheddable = {"x-gateway-inference-objective": "batch", "x-llm-d-slo-ttft-ms": "5"}
        async with http.post(f"{env.envoy_url}/v1/chat/completions", json=CHAT, headers=sheddable) as resp:
            assert resp.status == 500
            assert await resp.read() == REFUSED
            assert "x-llm-d-request-dropped-reason" not in resp.headers
        refused = await _explain(env, sheddable)
        assert (refused.failure.http_status, refused.failure.message.encode()) == (500, REFUSED)
        # ... standard priority is never refused by it, and a sheddable request with room is admitted.
        assert await _served_by(env, http, {"x-llm-d-slo-ttft-ms": "5"}) in (0, 1)
        relaxed = {"x-gateway-inference-objective": "batch", "x-llm-d-slo-ttft-ms": "100"}
        assert await _served_by(env, http, relaxed) == 1

        # Learning: every response Envoy relayed is a sample; training runs on the predictor's own thread.
        runs = predictor.stats.training_runs
        for _ in range(10):
            await _served_by(env, http, {"x-llm-d-slo-ttft-ms": "1000"})
        await wait_until(
            lambda: predictor.stats.training_runs > runs, timeout=20, message="a training run on the new samples"
        )
        assert predictor.stats.observations["ttft"] >= 15
        assert predictor.stats.training_thread.startswith("epp-latency-train")

        # ... and /metrics shows it: training runs, samples, the per-request series of upstream's names.
        async with http.get(env.picker.metrics_url) as resp:
            text = await resp.text()
        runs_line = f'epp_latency_predictor_training_runs_total{{plugin_name="{PRODUCER}",result="success"}}'
        assert float(text.split(runs_line, 1)[1].split()[0]) >= 1
        assert f'epp_latency_predictor_samples{{plugin_name="{PRODUCER}",set="train",target="ttft"}}' in text
        assert "llm_d_epp_request_ttft_prediction_duration_seconds_count{" in text
        assert "llm_d_epp_inference_request_metric{model_name=" in text
        violation = "llm_d_epp_request_slo_violation_total{model_name="
        assert violation in text  # the 5 ms objective the admitted standard request had was missed
        # No SLO plugin broke its contract (a latency-scorer score over 1 would count here).
        failures = [line for line in text.splitlines() if line.startswith("epp_plugin_errors_total{")]
        assert all(line.endswith(" 0.0") for line in failures), failures


async def test_without_a_model_the_scorer_falls_back_to_load(epp_pool: PoolFactory) -> None:
    env = await epp_pool(
        "v1", pods=2, objects=served("v1", MODEL), picker_args=["--config-text", CONFIG.format(state="")], envoy=True
    )
    await env.set_pins([{"waiting": 6, "kv_cache_usage": 0.9}, {"waiting": 0, "kv_cache_usage": 0.1}])
    async with aiohttp.ClientSession() as http:
        for _ in range(3):
            assert await _served_by(env, http, {"x-llm-d-slo-ttft-ms": "100"}) == 1
    assert not _producer(env).predictor.stats.model_ready
    answer = await _explain(env, {"x-llm-d-slo-ttft-ms": "100"})
    assert [(p.producer, len(p.endpoints)) for p in answer.latency] == [(PRODUCER, 0)]
    text = io.StringIO()
    render(answer, text)
    assert "no prediction (no model yet): the SLO plugins fall back" in text.getvalue()


REMOTE = """
apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: predicted-latency-producer
  parameters:
    predictor:
      backend: remote
      remote: {{trainingServerUrl: "{url}", predictionServerUrls: "{url}", flushInterval: 100ms}}
- type: slo-headroom-tier-filter
- type: latency-scorer
- type: max-score-picker
"""


async def test_the_remote_backend_speaks_upstreams_sidecar_apis(epp_pool: PoolFactory) -> None:
    """``backend: remote``: samples reach the training server, predictions come from the prediction server."""
    async with LatencyPredictorServer() as sidecars:
        args = ["--config-text", REMOTE.format(url=sidecars.url)]
        env = await epp_pool("v1", pods=2, objects=served("v1", MODEL), picker_args=args, envoy=True)
        async with aiohttp.ClientSession() as http:
            for _ in range(4):
                await _served_by(env, http, {"x-llm-d-slo-ttft-ms": "1000"})
            await wait_until(lambda: len(sidecars.samples) >= 4, timeout=20, message="samples flushed to the sidecar")
            assert all(s["actual_ttft_ms"] > 0 for s in sidecars.samples)
            answer = await _explain(env, {"x-llm-d-slo-ttft-ms": "1000"})
            (latency,) = answer.latency
            assert len(latency.endpoints) == 2 and all(e.ttft_ms > 0 for e in latency.endpoints)
            assert sidecars.prediction_calls >= 5
