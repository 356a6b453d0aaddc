"""The simulator's SGLang /generate over loopback: a JSON answer, a stream, and SGLang's 400s."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import aiohttp
import pytest

from epp_sim.modelserver import ModelServer, SimConfig


@pytest.fixture
async def server() -> AsyncIterator[ModelServer]:
    async with ModelServer(SimConfig(time_scale=50.0), host="127.0.0.2") as s:
        yield s


async def test_generate_answers_and_streams_as_sglang(server: ModelServer) -> None:
    async with aiohttp.ClientSession() as http:
        body = {"input_ids": [1, 2, 3, 4, 5], "sampling_params": {"max_new_tokens": 3}}
        async with http.post(server.url + "/generate", json=body) as resp:
            assert resp.status == 200
            answer = await resp.json()
        meta = answer["meta_info"]
        assert (meta["prompt_tokens"], meta["completion_tokens"]) == (5, 3)
        assert meta["finish_reason"] == {"type": "length", "length": 3} and len(answer["output_ids"]) == 3
        async with http.post(server.url + "/generate", json={"text": "hello there", "stream": True}) as resp:
            assert resp.headers["content-type"].startswith("text/event-stream")
            lines = (await resp.read()).decode().split("\n\n")
        events = [json.loads(line[6:]) for line in lines if line.startswith("data: {")]
        assert lines[-2] == "data: [DONE]"
        assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
        assert events[-1]["meta_info"]["finish_reason"] is not None
        assert events[-1]["text"].startswith(events[0]["text"])  # cumulative text, as SGLang streams
        for bad in ({}, {"input_ids": []}, {"input_ids": [1], "stream": "yes"}):
            async with http.post(server.url + "/generate", json=bad) as resp:
                assert resp.status == 400 and "message" in (await resp.json())["error"]
