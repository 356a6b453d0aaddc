"""``epp sidecar`` over real simulated engines: remote prefill then local decode, and every way it can go.

A prefill pod (a simulator) and a decode pod (a simulator behind the sidecar) on their own loopback
addresses. What each engine received (``/_sim/stats``) proves which legs ran; the sidecar's own
series prove how it counted them.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sidecar_parts import FAST, decode_pod, sample, url

from epp.framework import headers
from epp_sim.modelserver import ModelServer
from epp_sim.pki import make_pki
from epp_sim.ports import free_port

PROMPT = "the prompt of a long conversation " * 60  # 2040 characters: 510 prompt tokens
BODY: dict[str, Any] = {"model": FAST.model, "prompt": PROMPT, "max_tokens": 6}
PREFILL = "127.0.0.31"
DECODE = "127.0.0.32"


async def post(target: str, body: Any, **extra: str) -> tuple[int, dict[str, str], bytes]:
    async with aiohttp.ClientSession() as http, http.post(target, json=body, headers=extra, ssl=False) as resp:
        return resp.status, dict(resp.headers), await resp.read()


async def test_remote_prefill_then_local_decode() -> None:
    async with ModelServer(FAST, host=PREFILL) as prefill, decode_pod(DECODE) as (sidecar, (engine,)):
        # warm the prefill pod's cache with half the prompt: its cached tokens are what the client sees
        warm = {"model": FAST.model, "prompt": PROMPT[: len(PROMPT) // 2], "max_tokens": 1}
        assert (await post(f"{prefill.url}/v1/completions", warm))[0] == 200
        status, _, raw = await post(url(sidecar), BODY, **{headers.PREFILLER_HOST_PORT: prefill.address})
        answer = json.loads(raw)
        assert status == 200 and answer["usage"]["completion_tokens"] == 6
        assert answer["choices"][0]["finish_reason"] == "length"
        prefilled = prefill.stats()
        assert prefilled["remote_decodes"] == 1  # the prefill leg: remote decode, 1 token
        assert prefilled["last_kv_transfer_params"]["do_remote_decode"] is True
        decoded = engine.stats()
        assert decoded["remote_prefills"] == 1 and decoded["kv_pulled_tokens"] == 510
        assert decoded["last_kv_transfer_params"]["remote_engine_id"] == f"sim-{prefill.address}"
        assert headers.PREFILLER_HOST_PORT not in {k.lower() for k in decoded["last_headers"]}
        ids = [{k.lower(): v for k, v in leg["last_headers"].items()}["x-request-id"] for leg in (decoded, prefilled)]
        assert ids[0] == ids[1]  # one request id on both legs
        assert answer["usage"]["prompt_tokens_details"]["cached_tokens"] == 240  # the prefill pod's hits (15 blocks)
        assert sample(sidecar, "epp_sidecar_requests_total", path="/v1/completions", route="prefill-decode") == 1
        assert sample(sidecar, "epp_sidecar_prefill_duration_seconds_count", outcome="ok") == 1


async def test_streaming_chat_through_the_sidecar() -> None:
    async with ModelServer(FAST, host=PREFILL) as prefill, decode_pod(DECODE) as (sidecar, (engine,)):
        chat = {
            "model": FAST.model,
            "messages": [{"role": "user", "content": PROMPT}],
            "max_completion_tokens": 5,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        target = url(sidecar, "/v1/chat/completions")
        status, answer_headers, raw = await post(target, chat, **{headers.PREFILLER_HOST_PORT: prefill.address})
        assert status == 200 and answer_headers["Content-Type"].startswith("text/event-stream")
        events = [line[6:] for line in raw.decode().split("\n") if line.startswith("data: ")]
        assert events[-1] == "[DONE]"
        usage = json.loads(events[-2])["usage"]
        assert usage["completion_tokens"] == 5 and usage["prompt_tokens_details"]["cached_tokens"] == 0
        prefill_leg = prefill.stats()["last_kv_transfer_params"]
        assert prefill_leg["do_remote_decode"] is True  # the prefill leg was not streamed (a 400 otherwise)
        assert engine.stats()["remote_prefills"] == 1


async def test_without_a_prefill_pod_the_engine_does_everything() -> None:
    async with decode_pod(DECODE) as (sidecar, (engine,)):
        status, _, raw = await post(url(sidecar), BODY)
        assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 6
        assert engine.stats()["remote_prefills"] == 0 and engine.stats()["last_kv_transfer_params"] is None
        async with aiohttp.ClientSession() as http:
            async with http.get(url(sidecar, "/metrics")) as resp:  # everything else goes to the engine
                assert resp.status == 200 and "vllm:num_requests_running" in await resp.text()
            async with http.get(url(sidecar, "/health")) as resp:
                assert resp.status == 200
        assert sample(sidecar, "epp_sidecar_requests_total", path="/v1/completions", route="decode-only") == 1


async def test_a_dead_prefiller_is_retried_then_prefilled_locally(caplog: pytest.LogCaptureFixture) -> None:
    dead = f"{PREFILL}:{free_port(PREFILL)}"  # nothing listens there
    flags = ("--prefill-max-retries=2", "--prefill-retry-backoff=10ms")
    async with decode_pod(DECODE, *flags) as (sidecar, (engine,)):
        status, _, raw = await post(url(sidecar), BODY, **{headers.PREFILLER_HOST_PORT: dead})
        assert status == 200 and json.loads(raw)["usage"]["completion_tokens"] == 6
        assert engine.stats()["remote_prefills"] == 0  # the decode engine prefilled it itself
        assert engine.stats()["last_kv_transfer_params"] is None
        assert sample(sidecar, "epp_sidecar_prefill_failures_total", reason="connect") == 3
        assert sample(sidecar, "epp_sidecar_prefill_retries_total") == 2
        assert sample(sidecar, "epp_sidecar_local_prefill_fallbacks_total") == 1
        assert sample(sidecar, "epp_sidecar_requests_total", path="/v1/completions", route="local-prefill") == 1
    assert "the decode engine prefills the request itself" in caplog.text


async def test_upstreams_behaviour_without_the_fallback() -> None:
    dead = f"{PREFILL}:{free_port(PREFILL)}"
    async with decode_pod(DECODE, "--local-prefill-fallback=false") as (sidecar, (engine,)):
        status, _, raw = await post(url(sidecar), BODY, **{headers.PREFILLER_HOST_PORT: dead})
        error = json.loads(raw)
        assert status == 502 and error["object"] == "error" and error["type"] == "BadGateway"
        assert engine.stats()["requests"] == 0


async def test_a_failing_prefill_engine_and_a_refused_request() -> None:
    async with ModelServer(FAST, host=PREFILL) as prefill, decode_pod(DECODE) as (sidecar, (engine,)):
        prefill.fail(500)  # an engine that died: not retried (upstream retries 502-504 only), prefilled locally
        assert (await post(url(sidecar), BODY, **{headers.PREFILLER_HOST_PORT: prefill.address}))[0] == 200
        assert sample(sidecar, "epp_sidecar_prefill_failures_total", reason="status") == 1
        assert sample(sidecar, "epp_sidecar_local_prefill_fallbacks_total") == 1
        prefill.recover()
        unknown = {**BODY, "model": "no-such-model"}  # the prefill pod refuses it: the client is told
        status, _, raw = await post(url(sidecar), unknown, **{headers.PREFILLER_HOST_PORT: prefill.address})
        assert status == 404 and "does not exist" in json.loads(raw)["error"]["message"]
        assert sample(sidecar, "epp_sidecar_requests_total", path="/v1/completions", route="prefill-error") == 1


async def test_a_prefiller_that_never_answers_times_out() -> None:
    accepted: list[asyncio.StreamWriter] = []

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(writer)  # reads nothing, answers nothing: a frozen process

    frozen = await asyncio.start_server(hold, PREFILL, 0)
    port = frozen.sockets[0].getsockname()[1]
    try:
        async with decode_pod(DECODE, "--prefill-timeout=200ms") as (sidecar, (engine,)):
            status, _, _ = await post(url(sidecar), BODY, **{headers.PREFILLER_HOST_PORT: f"{PREFILL}:{port}"})
            assert status == 200 and engine.stats()["remote_prefills"] == 0
            assert sample(sidecar, "epp_sidecar_prefill_failures_total", reason="timeout") == 1
    finally:
        for writer in accepted:
            writer.close()
        frozen.close()
        await frozen.wait_closed()


async def test_bad_requests_and_a_missing_engine() -> None:
    async with ModelServer(FAST, host=PREFILL) as prefill, decode_pod(DECODE) as (sidecar, (engine,)):
        async with aiohttp.ClientSession() as http:
            named = {headers.PREFILLER_HOST_PORT: prefill.address, "Content-Type": "application/json"}
            async with http.post(url(sidecar), data=b"{not json", headers=named) as resp:
                error = await resp.json()
            assert resp.status == 400 and error["type"] == "BadRequestError" and error["code"] == 400
            async with http.post(url(sidecar), data=b"[1, 2]", headers=named) as resp:
                assert resp.status == 400
        await engine.stop()
        status, _, raw = await post(url(sidecar), BODY)
        error = json.loads(raw)
        assert status == 503 and error["message"].startswith("The decode node is not ready")
        assert sample(sidecar, "epp_sidecar_decode_errors_total", status="503") == 1


async def test_data_parallel_ranks() -> None:
    async with decode_pod(DECODE, ranks=3) as (sidecar, engines):
        rank2 = f"{DECODE}:{sidecar.ports[2]}"
        assert (await post(url(sidecar), BODY, **{headers.DATA_PARALLEL_HOST_PORT: rank2}))[0] == 200
        assert [e.stats()["requests"] for e in engines] == [0, 0, 1]
        assert (await post(url(sidecar, rank=1), BODY))[0] == 200  # each rank's own listener
        assert [e.stats()["requests"] for e in engines] == [0, 1, 1]
        status, _, raw = await post(url(sidecar), BODY, **{headers.DATA_PARALLEL_HOST_PORT: f"{DECODE}:1"})
        assert status == 400 and b"unknown x-data-parallel-host-port" in raw
        assert sample(sidecar, "epp_sidecar_requests_total", path="/v1/completions", route="data-parallel") == 1


async def test_shared_storage_connector() -> None:
    async with (
        ModelServer(FAST, host=PREFILL) as prefill,
        decode_pod(DECODE, "--kv-connector=shared-storage") as (sidecar, (engine,)),
    ):
        named = {headers.PREFILLER_HOST_PORT: prefill.address}
        status, _, raw = await post(url(sidecar), {**BODY, "cache_hit_threshold": 0.5}, **named)
        assert status == 200 and json.loads(raw)["choices"][0]["finish_reason"] == "length"
        assert prefill.stats()["requests"] == 1  # the decode pod held too little: prefilled there first
        assert engine.stats()["requests"] == 2  # tried (cache_threshold), then decoded
        status, _, raw = await post(url(sidecar), {**BODY, "cache_hit_threshold": 0.5}, **named)
        assert status == 200 and prefill.stats()["requests"] == 1  # now cached on the decode pod: no prefill
        status, _, raw = await post(url(sidecar), BODY, **named)  # no threshold: prefill, then decode
        assert status == 200 and prefill.stats()["requests"] == 2


async def test_tls_to_the_prefiller_and_from_the_gateway(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pki = make_pki(tmp_path, server="prefill")
    monkeypatch.setenv("SSL_CERT_FILE", str(pki.ca))  # the system's CAs, as far as the sidecar can tell
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(pki.server_dir / "tls.crt", pki.server_dir / "tls.key")
    async with (
        ModelServer(FAST, host="127.0.0.1", ssl_context=server_tls) as prefill,
        decode_pod(DECODE, "--enable-tls=prefiller", "--secure-proxy=true") as (sidecar, (engine,)),
    ):
        status, _, _ = await post(url(sidecar), BODY, **{headers.PREFILLER_HOST_PORT: prefill.address})
        assert status == 200 and prefill.stats()["remote_decodes"] == 1 and engine.stats()["remote_prefills"] == 1
        assert url(sidecar).startswith("https://")  # the gateway's side is TLS too (self-signed)
    monkeypatch.delenv("SSL_CERT_FILE")  # an unknown CA: the handshake fails, the decode engine prefills
    async with (
        ModelServer(FAST, host="127.0.0.1", ssl_context=server_tls) as prefill,
        decode_pod(DECODE, "--enable-tls=prefiller") as (sidecar, (engine,)),
    ):
        status, _, _ = await post(url(sidecar), BODY, **{headers.PREFILLER_HOST_PORT: prefill.address})
        assert status == 200 and prefill.stats()["requests"] == 0 and engine.stats()["remote_prefills"] == 0
        assert sample(sidecar, "epp_sidecar_local_prefill_fallbacks_total") == 1
