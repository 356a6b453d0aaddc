"""The simulator's Anthropic Messages API over loopback: JSON message, event stream, errors."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.waits import wait_until

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
BODY: dict[str, Any] = {
    "model": MODEL,
    "max_tokens": 6,
    "system": "Be brief.",
    "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}]}],
}


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer(SimConfig(time_scale=50.0), host="127.0.0.2") as s:
        yield s


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(raise_for_status=False) as session:
        yield session


async def test_message_json_with_usage(server: ModelServer, http: aiohttp.ClientSession) -> None:
    async with http.post(server.url + "/v1/messages", json=BODY) as resp:
        assert resp.status == 200
        body = await resp.json()
    assert (body["type"], body["role"], body["model"], body["stop_reason"]) == (
        "message",
        "assistant",
        MODEL,
        "max_tokens",
    )
    assert body["content"][0]["type"] == "text" and len(body["content"][0]["text"].split()) == 6
    assert body["usage"]["output_tokens"] == 6 and body["usage"]["input_tokens"] > 0


async def test_message_stream_has_anthropic_events(server: ModelServer, http: aiohttp.ClientSession) -> None:
    async with http.post(server.url + "/v1/messages", json={**BODY, "stream": True}) as resp:
        assert resp.headers["Content-Type"] == "text/event-stream"
        text = (await resp.read()).decode()
    events = [block.split("\n") for block in text.strip().split("\n\n")]
    names = [lines[0].removeprefix("event: ") for lines in events]
    data = [json.loads(lines[1].removeprefix("data: ")) for lines in events]
    assert names[:2] == ["message_start", "content_block_start"]
    assert names[-3:] == ["content_block_stop", "message_delta", "message_stop"]
    assert set(names[2:-3]) == {"content_block_delta"}
    assert [d["type"] for d in data] == names
    assert data[0]["message"]["usage"]["input_tokens"] > 0
    assert data[-2]["usage"] == {"output_tokens": 6} and data[-2]["delta"]["stop_reason"] == "max_tokens"
    assert sum(len(d["delta"]["text"].split()) for d in data[2:-3]) == 6


@pytest.mark.parametrize(
    ("body", "status", "needle"),
    [
        ({**BODY, "messages": []}, 400, "messages"),
        ({k: v for k, v in BODY.items() if k != "max_tokens"}, 400, "max_tokens"),
        ({**BODY, "model": "nope"}, 404, "model"),
        ({**BODY, "messages": [{"role": "robot", "content": "x"}]}, 400, "messages.0.role"),
    ],
)
async def test_bad_requests_get_anthropic_errors(
    server: ModelServer, http: aiohttp.ClientSession, body: dict[str, Any], status: int, needle: str
) -> None:
    async with http.post(server.url + "/v1/messages", json=body) as resp:
        assert resp.status == status
        err = await resp.json()
    assert err["type"] == "error" and needle in err["error"]["message"]


_OPENAI_CHAT = ("/v1/chat/completions", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
_ANTHROPIC = ("/v1/messages", BODY)


@pytest.mark.parametrize(
    ("api", "refused", "stopped"),
    [
        (_OPENAI_CHAT, ("BadRequestError", 400), ("ServiceUnavailableError", 503)),
        (_ANTHROPIC, ("invalid_request_error", 400), ("overloaded_error", 503)),
    ],
    ids=["openai", "anthropic"],
)
async def test_engine_refusal_and_stop_in_each_apis_error_shape(
    server: ModelServer,
    http: aiohttp.ClientSession,
    api: tuple[str, dict[str, Any]],
    refused: tuple[str, int],
    stopped: tuple[str, int],
) -> None:
    path, body = api

    def error_type(doc: dict[str, Any]) -> tuple[str, int]:
        error = doc["error"]
        return error["type"], error.get("code", 400)

    async with http.post(server.url + path, json={**body, "max_tokens": 100_000}) as resp:  # over the context
        assert resp.status == 400
        doc = await resp.json()
    assert error_type(doc)[0] == refused[0] and "cannot be greater than max_model_len" in doc["error"]["message"]
    async with http.get(server.url + "/_sim/stats") as resp:
        stats = await resp.json()
    assert (stats["errors"], stats["requests"]) == (1, 0)

    answer = asyncio.ensure_future(http.post(server.url + path, json={**body, "max_tokens": 4000}))
    await wait_until(lambda: server.engine.stats()["running"] == 1, timeout=5, message="request never ran")
    await server.engine.stop()
    async with await answer as resp:
        assert resp.status == stopped[1]
        doc = await resp.json()
    assert error_type(doc)[0] == stopped[0]
