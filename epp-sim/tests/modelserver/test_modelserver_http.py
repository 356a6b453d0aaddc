"""The HTTP surface over real loopback sockets: OpenAI endpoints, SSE, errors, /metrics, pins, stats."""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.waits import wait_until

MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# Every family a vLLM 0.32 (V1) API server exposes, with its type as the parser reports it (the
# real-engine tier compares the whole page with a real server's: real_engine_tests/test_simulator_tracks_vllm.py).
VLLM_FAMILIES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:num_requests_waiting_by_reason": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prefix_cache_queries": "counter",
    "vllm:prefix_cache_hits": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:prompt_tokens": "counter",
    "vllm:prompt_tokens_by_source": "counter",
    "vllm:prompt_tokens_cached": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:lora_requests_info": "gauge",
    "vllm:cache_config_info": "gauge",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:request_time_per_output_token_seconds": "histogram",
    "vllm:request_num_preemptions": "histogram",
    "vllm:request_prefill_kv_computed_tokens": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prefill_time_seconds": "histogram",
    "vllm:request_decode_time_seconds": "histogram",
    "vllm:request_inference_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:request_max_num_generation_tokens": "histogram",
    "vllm:request_params_n": "histogram",
    "vllm:request_params_max_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
}
OTHER_FAMILIES = {
    "python_gc_objects_collected": "counter",
    "python_info": "gauge",
    "process_resident_memory_bytes": "gauge",
    "process_cpu_seconds": "counter",
    "http_requests": "counter",
    "http_request_duration_seconds": "histogram",
}
TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75]
TTFT_BUCKETS += [1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0, math.inf]


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    cfg = SimConfig(lora_modules={"sql-lora": "/adapters/sql"}, time_scale=50.0, lora_load_time=0.05)
    async with ModelServer(cfg, host="127.0.0.2") as s:
        yield s


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(raise_for_status=False) as session:
        yield session


async def _post(http: aiohttp.ClientSession, url: str, body: Any) -> tuple[int, Any]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with http.post(url, data=data, headers={"Content-Type": "application/json"}) as resp:
        text = await resp.text()
        return resp.status, json.loads(text) if resp.content_type == "application/json" else text


async def _sse(resp: aiohttp.ClientResponse) -> list[Any]:
    """Events in order; ``[DONE]`` as the string."""
    events: list[Any] = []
    async for raw in resp.content:
        line = raw.decode().rstrip("\n")
        if not line:
            continue
        assert line.startswith("data: "), line
        payload = line[len("data: ") :]
        events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


async def _metrics(http: aiohttp.ClientSession, server: ModelServer) -> dict[str, Any]:
    async with http.get(server.url + "/metrics") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = await resp.text()
    return {f.name: f for f in text_string_to_metric_families(text)}


async def test_completion_json_echoes_model_and_reports_usage(server: ModelServer, http: aiohttp.ClientSession) -> None:
    status, body = await _post(
        http, server.url + "/v1/completions", {"model": MODEL, "prompt": "x" * 40, "max_tokens": 7}
    )
    assert status == 200
    assert body["object"] == "text_completion" and body["id"].startswith("cmpl-")
    assert body["model"] == MODEL
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length" and len(choice["text"].split()) == 7
    assert body["usage"]["prompt_tokens"] == 10
    assert body["usage"]["completion_tokens"] == 7 and body["usage"]["total_tokens"] == 17


async def test_chat_json_on_an_adapter(server: ModelServer, http: aiohttp.ClientSession) -> None:
    req = {"model": "sql-lora", "messages": [{"role": "user", "content": "select?"}], "max_completion_tokens": 3}
    status, body = await _post(http, server.url + "/v1/chat/completions", req)
    assert status == 200
    assert body["object"] == "chat.completion" and body["model"] == "sql-lora"
    assert body["choices"][0]["message"]["role"] == "assistant"
    assert len(body["choices"][0]["message"]["content"].split()) == 3
    assert body["usage"]["completion_tokens"] == 3


async def test_completion_stream_chunk_by_chunk_with_usage(server: ModelServer, http: aiohttp.ClientSession) -> None:
    req = {"prompt": "stream", "max_tokens": 5, "stream": True, "stream_options": {"include_usage": True}}
    async with http.post(server.url + "/v1/completions", json=req) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "text/event-stream; charset=utf-8"  # as vLLM 0.32 sends it
        events = await _sse(resp)
    assert events[-1] == "[DONE]"
    usage_chunk = events[-2]
    assert usage_chunk["choices"] == [] and usage_chunk["usage"]["completion_tokens"] == 5
    content = events[:-2]
    assert all(e["object"] == "text_completion" and e["model"] == MODEL for e in content)
    assert len({e["id"] for e in events[:-1]}) == 1
    assert "".join(e["choices"][0]["text"] for e in content).count(" ") == 5
    assert [e["choices"][0]["finish_reason"] for e in content][-1] == "length"
    assert all(e["choices"][0]["finish_reason"] is None for e in content[:-1])


async def test_chat_stream_starts_with_role_and_has_no_usage_unless_asked(
    server: ModelServer, http: aiohttp.ClientSession
) -> None:
    req = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "stream": True}
    async with http.post(server.url + "/v1/chat/completions", json=req) as resp:
        events = await _sse(resp)
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert events[-1] == "[DONE]"
    chunks = events[1:-1]
    assert all(e["object"] == "chat.completion.chunk" and "usage" not in e for e in chunks)
    assert sum(len(e["choices"][0]["delta"]["content"].split()) for e in chunks) == 4
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


async def test_models_lists_base_and_adapters_and_runtime_loading(
    server: ModelServer, http: aiohttp.ClientSession
) -> None:
    async with http.get(server.url + "/v1/models") as resp:
        ids = [m["id"] for m in (await resp.json())["data"]]
    assert ids == [MODEL, "sql-lora"]
    status, _ = await _post(http, server.url + "/v1/load_lora_adapter", {"lora_name": "new", "lora_path": "/n"})
    assert status == 200
    status, body = await _post(http, server.url + "/v1/completions", {"model": "new", "prompt": "p", "max_tokens": 1})
    assert status == 200 and body["model"] == "new"
    status, _ = await _post(http, server.url + "/v1/load_lora_adapter", {"lora_name": "new", "lora_path": "/n"})
    assert status == 400
    status, _ = await _post(http, server.url + "/v1/unload_lora_adapter", {"lora_name": "new"})
    assert status == 200
    status, body = await _post(http, server.url + "/v1/completions", {"model": "new", "prompt": "p"})
    assert status == 404


@pytest.mark.parametrize(
    ("path", "body", "status", "fragment"),
    [
        (
            "/v1/completions",
            {"model": "nope", "prompt": "p"},
            404,
            f"The model `nope` does not exist. Valid aliases: {MODEL}.",
        ),
        ("/v1/completions", b"{not json", 400, "'type': 'json_invalid', 'loc': 'body.1', 'msg': 'JSON decode error'"),
        ("/v1/completions", b"[1, 2]", 400, "Input should be a valid dictionary or object to extract fields from"),
        ("/v1/completions", {"model": MODEL}, 400, "Either prompt or prompt_embeds must be provided and non-empty."),
        ("/v1/completions", {"prompt": ["a", "b"]}, 400, "batched prompts"),
        ("/v1/completions", {"prompt": "p", "max_tokens": 0}, 400, "max_tokens"),
        ("/v1/completions", {"prompt": "p", "max_tokens": 100000}, 400, "max_tokens=100000 cannot be greater than"),
        ("/v1/completions", {"prompt": "x" * 40000}, 400, "your prompt contains at least 8193 input tokens"),
        ("/v1/chat/completions", {"model": MODEL}, 400, "messages is required"),
        ("/v1/chat/completions", {"messages": []}, 400, "non-empty list"),
        ("/v1/chat/completions", {"messages": [{"content": "x"}]}, 400, "string role"),
    ],
)
async def test_bad_requests_get_openai_errors(
    server: ModelServer, http: aiohttp.ClientSession, path: str, body: Any, status: int, fragment: str
) -> None:
    got, err = await _post(http, server.url + path, body)
    assert got == status
    assert fragment in err["error"]["message"]
    assert err["error"]["code"] == status and err["error"]["type"]
    ok, _ = await _post(http, server.url + "/v1/completions", {"prompt": "still alive", "max_tokens": 1})
    assert ok == 200


async def test_metrics_has_every_vllm_family_with_real_buckets(
    server: ModelServer, http: aiohttp.ClientSession
) -> None:
    await _post(http, server.url + "/v1/completions", {"prompt": "warm up", "max_tokens": 3})
    families = await _metrics(http, server)
    for name, kind in {**VLLM_FAMILIES, **OTHER_FAMILIES}.items():
        assert name in families, name
        assert families[name].type == kind, name
    ttft = families["vllm:time_to_first_token_seconds"]
    bounds = [float(s.labels["le"]) for s in ttft.samples if s.name.endswith("_bucket")]
    assert bounds == TTFT_BUCKETS
    assert all(s.labels.get("model_name") == MODEL and s.labels.get("engine") == "0" for s in ttft.samples)
    reasons = {s.labels["finished_reason"] for s in families["vllm:request_success"].samples}
    assert reasons == {"stop", "length", "abort"}
    cache = families["vllm:cache_config_info"].samples[0].labels
    assert (cache["block_size"], cache["num_gpu_blocks"]) == ("16", "8192")
    gen = families["vllm:generation_tokens"].samples[0]
    assert gen.name == "vllm:generation_tokens_total" and gen.value == 3.0


async def test_metrics_family_order_interleaves_like_vllm(server: ModelServer, http: aiohttp.ClientSession) -> None:
    async with http.get(server.url + "/metrics") as resp:
        text = await resp.text()
    pos = {
        name: text.index(f"# TYPE {name}")
        for name in ("python_gc_objects_collected_total", "vllm:num_requests_running")
    }
    assert pos["python_gc_objects_collected_total"] < pos["vllm:num_requests_running"]
    order = [text.index(f"# TYPE {n}") for n in ("vllm:kv_cache_usage_perc", "vllm:e2e_request_latency_seconds")]
    order += [text.index("# TYPE vllm:lora_requests_info"), text.index("# TYPE vllm:cache_config_info")]
    assert order == sorted(order)
    assert len(text) > 20_000  # a full vLLM scrape, not a summary


async def test_pins_over_http_appear_exactly(server: ModelServer, http: aiohttp.ClientSession) -> None:
    pin = {"waiting": 12, "running": 3, "kv_cache_usage": 0.875, "running_loras": ["a", "b"], "waiting_loras": "c"}
    status, body = await _post(http, server.url + "/_sim/pin", {**pin, "max_lora": 4})
    assert status == 200 and body["pins"]["running_loras"] == ["a", "b"]
    fams = await _metrics(http, server)
    assert fams["vllm:num_requests_waiting"].samples[0].value == 12
    assert fams["vllm:num_requests_running"].samples[0].value == 3
    assert fams["vllm:kv_cache_usage_perc"].samples[0].value == 0.875
    assert "vllm:gpu_cache_usage_perc" not in fams  # gone since vLLM 0.11, as from the simulator
    by_reason = {s.labels["reason"]: s.value for s in fams["vllm:num_requests_waiting_by_reason"].samples}
    assert by_reason == {"capacity": 12, "deferred": 0}
    newest = max(fams["vllm:lora_requests_info"].samples, key=lambda s: s.value).labels
    assert newest == {"max_lora": "4", "running_lora_adapters": "a,b", "waiting_lora_adapters": "c"}

    status, _ = await _post(http, server.url + "/_sim/pin", {"waiting": None})  # unpin one field
    fams = await _metrics(http, server)
    assert fams["vllm:num_requests_waiting"].samples[0].value == 0
    assert fams["vllm:num_requests_running"].samples[0].value == 3

    status, err = await _post(http, server.url + "/_sim/pin", {"kv_cache_usage": 2})
    assert status == 400 and "kv_cache_usage" in err["error"]["message"]
    status, body = await _post(http, server.url + "/_sim/pin", {"gauges": {"acme:gpu_power_watts": 312.5}})
    assert status == 200 and body["pins"]["gauges"] == {"acme:gpu_power_watts": 312.5}
    assert (await _metrics(http, server))["acme:gpu_power_watts"].samples[
        0
    ].value == 312.5  # custom metrics a plugin reads
    for bad, message in (
        ({"9x": 1}, "'9x' is not a Prometheus metric name"),
        ({"g": "hot"}, "gauges.g must be a finite"),
    ):
        status, err = await _post(http, server.url + "/_sim/pin", {"gauges": bad})
        assert status == 400 and message in err["error"]["message"]
    status, err = await _post(http, server.url + "/_sim/pin", {"queue": 1})
    assert status == 400 and "unknown pin fields" in err["error"]["message"]

    async with http.delete(server.url + "/_sim/pin") as resp:
        assert resp.status == 200
    fams = await _metrics(http, server)
    assert fams["vllm:num_requests_running"].samples[0].value == 0
    newest = max(fams["vllm:lora_requests_info"].samples, key=lambda s: s.value).labels
    assert newest == {"max_lora": "1", "running_lora_adapters": "", "waiting_lora_adapters": ""}


async def test_fail_answers_completions_with_the_status_while_metrics_still_answer(
    server: ModelServer, http: aiohttp.ClientSession
) -> None:
    completion = {"model": MODEL, "prompt": "hi", "max_tokens": 2}
    status, body = await _post(http, server.url + "/_sim/fail", {"status": 503})
    assert status == 200 and body == {"failing": 503}
    status, err = await _post(http, server.url + "/v1/completions", completion)
    assert status == 503 and err["error"]["type"] == "InternalServerError"
    await _metrics(http, server)  # still 200
    status, err = await _post(http, server.url + "/_sim/fail", {"status": 200})
    assert status == 400 and "400-599" in err["error"]["message"]
    async with http.delete(server.url + "/_sim/fail") as resp:
        assert resp.status == 200
    status, _ = await _post(http, server.url + "/v1/completions", completion)
    assert status == 200
    server.fail()  # the in-process spelling
    assert (await _post(http, server.url + "/v1/completions", completion))[0] == 500
    server.recover()
    assert (await _post(http, server.url + "/v1/completions", completion))[0] == 200
    assert server.stats()["errors"] == 2


async def test_stats_report_who_served_what_and_prefix_hits(server: ModelServer, http: aiohttp.ClientSession) -> None:
    prompt = "shared system prompt. " * 60
    for model in (MODEL, "sql-lora", MODEL):
        status, _ = await _post(
            http, server.url + "/v1/completions", {"model": model, "prompt": prompt, "max_tokens": 1}
        )
        assert status == 200
    async with http.get(server.url + "/_sim/stats", headers={"x-test": "1"}) as resp:
        stats = await resp.json()
    assert stats["requests"] == 3
    assert stats["by_model"] == {MODEL: 2, "sql-lora": 1}
    assert stats["last_model"] == MODEL and stats["last_path"] == "/v1/completions"
    assert stats["prefix_cache_hits"] > 0  # the third request reused the first's blocks
    assert stats == server.stats() | {"sim_time": stats["sim_time"], "running": 0, "waiting": 0}


async def test_client_disconnect_aborts_and_frees_kv(server: ModelServer, http: aiohttp.ClientSession) -> None:
    req = {"prompt": "long " * 200, "max_tokens": 5000, "stream": True}
    async with http.post(server.url + "/v1/completions", json=req) as resp:
        await resp.content.readline()
        assert server.engine.running == 1
        resp.close()
    await wait_until(lambda: server.engine.running == 0, timeout=5, message="request aborted")
    assert server.engine.kv_cache_usage == 0.0


async def test_non_streaming_client_disconnect_aborts(server: ModelServer, http: aiohttp.ClientSession) -> None:
    body = {"prompt": "wait for me", "max_tokens": 5000}
    task = asyncio.create_task(_post(http, server.url + "/v1/completions", body), name="abandoned-request")
    await wait_until(lambda: server.engine.running == 1, timeout=5, message="request running")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: server.engine.running == 0, timeout=5, message="request aborted")
    assert server.engine.kv_cache_usage == 0.0


async def test_health(server: ModelServer, http: aiohttp.ClientSession) -> None:
    async with http.get(server.url + "/health") as resp:
        assert resp.status == 200


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions", "/v1/completions/render", "/tokenize"])
async def test_a_body_not_sent_as_json_is_refused_as_vllm_refuses_it(
    server: ModelServer, http: aiohttp.ClientSession, path: str
) -> None:
    async with http.post(server.url + path, data=b'{"prompt": "hi"}', headers={"Content-Type": "text/plain"}) as resp:
        assert resp.status == 400
        error = (await resp.json())["error"]
    assert error == {
        "message": "1 validation error:\n  Unsupported Media Type: Only 'application/json' is allowed",
        "type": "Bad Request",
        "param": None,
        "code": 400,
    }
