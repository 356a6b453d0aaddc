"""The simulator tracks the engine: the same requests to ``epp sim model-server`` and to real vLLM 0.32.

The simulator runs as the real server is configured (its model name, the model folder's own
tokenizer and chat template, 128-token blocks, the context length, KV events), so where both
are deterministic the answers must be equal, and everywhere else their shapes must be:

- ``/metrics``: every family and its type, and each family's label names;
- KV events: the frames, the batch's and the events' encoding, field names and value types,
  and the token ids, block size, extra keys, group and attention kind of a stored prompt;
- error bodies, byte for byte as JSON: an unknown model, a body that is not JSON, one that is
  not an object, no prompt, a prompt longer than the context, ``max_tokens`` over it, a body
  sent without ``Content-Type: application/json`` (vLLM refuses it: the picker's token-producer
  sent none until this test's first run against a real vLLM);
- SSE framing (content type, ``data:`` events, ``[DONE]``), each chunk's fields, the usage chunk;
- JSON answers' fields and usage;
- ``/tokenize``, ``/v1/completions/render`` and ``/v1/chat/completions/render``: fields and ids.

What differs on purpose is in :data:`DELIBERATE` (and docs/simulator.md); anything else fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgpack
import pytest
import pytest_asyncio
import zmq
import zmq.asyncio

from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.modelserver.kv_events import KvEventsConfig
from epp_sim.ports import free_port
from epp_sim.realengine.servers import MAX_NUM_SEQS, MODEL, VllmFleet, VllmServer
from epp_sim.waits import wait_until

pytestmark = pytest.mark.real_engine(kv_events="pods")  # vLLM binds its publisher, so the test can subscribe

SIM_HOST = "127.0.0.230"
DELIBERATE = {
    "render needs --enable-scale-out": "vLLM 0.32 answers render 403 without it; the simulator always serves render",
    "block hashes": "vLLM hashes blocks with sha256 of its pickled key; the simulator with xxh64 (both are opaque)",
}
"""Differences kept on purpose (the test asserts around them; docs/simulator.md lists them)."""


def shape(value: Any) -> Any:
    """The structure of a JSON value: objects by key, lists by their first item, scalars by type."""
    if isinstance(value, dict):
        return {k: shape(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shape(value[0])] if value else []
    return "null" if value is None else type(value).__name__


class Pair:
    """The same request to the simulator and to vLLM."""

    def __init__(self, http: aiohttp.ClientSession, sim: ModelServer, engine: VllmServer) -> None:
        self.http = http
        self.urls = {"sim": sim.url, "vllm": engine.url}

    async def post(
        self, path: str, body: Any, content_type: str = "application/json"
    ) -> dict[str, tuple[int, str, str]]:
        """``{"sim" | "vllm": (status, content type, text)}``."""
        out = {}
        for side, url in self.urls.items():
            data = body if isinstance(body, bytes) else json.dumps(body).encode()
            headers = {"Content-Type": content_type}
            async with self.http.post(url + path, data=data, headers=headers) as resp:
                out[side] = (resp.status, resp.headers.get("Content-Type", ""), await resp.text())
        return out

    async def get(self, path: str) -> dict[str, str]:
        out = {}
        for side, url in self.urls.items():
            async with self.http.get(url + path) as resp:
                assert resp.status == 200
                out[side] = await resp.text()
        return out


@pytest_asyncio.fixture
async def pair(epp_vllm: VllmFleet) -> AsyncIterator[tuple[Pair, ModelServer, VllmServer]]:
    engine = epp_vllm.servers[0]
    events_port = free_port(SIM_HOST)
    config = SimConfig(
        model=MODEL,
        tokenizer=str(epp_vllm.install.model),
        block_size=128,
        num_gpu_blocks=364,
        max_model_len=2048,
        max_num_seqs=MAX_NUM_SEQS,
        kv_events=KvEventsConfig(
            enable_kv_cache_events=True, endpoint=f"tcp://*:{events_port}", topic=f"kv@{SIM_HOST}:0@{MODEL}"
        ),
    )
    async with (
        ModelServer(config, host=SIM_HOST) as sim,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http,
    ):
        yield Pair(http, sim, engine), sim, engine


def families(page: str) -> dict[str, tuple[str, frozenset[str]]]:
    """``name → (type, label names)`` of every family on a Prometheus page."""
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", page, re.M))
    labels: dict[str, set[str]] = {name: set() for name in types}
    for name, body in re.findall(r"^([a-zA-Z_:][\w:]*)\{([^}]*)\} ", page, re.M):
        family = next((f for f in (name, re.sub(r"_(bucket|count|sum)$", "", name)) if f in types), None)
        if family is not None:
            labels[family] |= set(re.findall(r'(\w+)="', body)) - {"le"}
    return {name: (kind, frozenset(labels[name])) for name, kind in types.items()}


async def test_metrics_families_types_and_labels(pair: tuple[Pair, ModelServer, VllmServer]) -> None:
    p, _, _ = pair
    for path in ("/v1/completions", "/v1/chat/completions"):  # so both have observed histograms and HTTP series
        body: dict[str, Any] = {"model": MODEL, "max_tokens": 2}
        body |= {"prompt": "Hello"} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "Hi"}]}
        answers = await p.post(path, body)
        assert {side: a[0] for side, a in answers.items()} == {"sim": 200, "vllm": 200}
    pages = await p.get("/metrics")
    sim, real = families(pages["sim"]), families(pages["vllm"])
    assert sorted(set(real) - set(sim)) == [], "families vLLM has and the simulator lacks"
    assert sorted(set(sim) - set(real)) == [], "families the simulator has and vLLM does not"
    differing = {name: (sim[name], real[name]) for name in real if sim[name] != real[name]}
    assert differing == {}, "type or label names differ (simulator, vLLM)"


async def test_error_bodies_are_vllms(pair: tuple[Pair, ModelServer, VllmServer]) -> None:
    p, _, _ = pair
    cases: dict[str, tuple[str, Any]] = {
        "unknown model": ("/v1/completions", {"model": "no-such-model", "prompt": "hi"}),
        "unknown model (chat)": (
            "/v1/chat/completions",
            {"model": "nope", "messages": [{"role": "user", "content": "x"}]},
        ),
        "bad JSON": ("/v1/completions", b'{"model":"smollm2","prompt":"Hello",'),
        "bad JSON (chat)": ("/v1/chat/completions", b"xx"),
        "not an object": ("/v1/completions", b"[1,2]"),
        "no prompt": ("/v1/completions", {"model": MODEL}),
        "too long": ("/v1/completions", {"model": MODEL, "prompt": "hello " * 2100, "max_tokens": 1}),
        "max_tokens over the context": ("/v1/completions", {"model": MODEL, "prompt": "hi", "max_tokens": 4000}),
    }
    for case, (path, body) in cases.items():
        answers = await p.post(path, body)
        (sim_status, _, sim_text), (real_status, _, real_text) = answers["sim"], answers["vllm"]
        assert (sim_status, json.loads(sim_text)) == (real_status, json.loads(real_text)), case
    for path in ("/v1/completions", "/v1/completions/render", "/tokenize"):  # a body that does not say it is JSON
        answers = await p.post(path, {"model": MODEL, "prompt": "hi"}, content_type="text/plain")
        (sim_status, _, sim_text), (real_status, _, real_text) = answers["sim"], answers["vllm"]
        assert (sim_status, json.loads(sim_text)) == (real_status, json.loads(real_text)), path


def sse_events(text: str) -> list[str]:
    assert text.endswith("\n\n"), "SSE events end with a blank line"
    events = text[:-2].split("\n\n")
    assert all(e.startswith("data: ") for e in events), events
    return [e.removeprefix("data: ") for e in events]


def chunk_shapes(text: str) -> list[Any]:
    """Each chunk's shape; runs of identical shapes are one (the engines may split tokens differently)."""
    events = sse_events(text)
    assert events[-1] == "[DONE]"
    shapes: list[Any] = []
    for event in events[:-1]:
        s = shape(json.loads(event))
        if not shapes or shapes[-1] != s:
            shapes.append(s)
    return shapes


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_sse_framing_chunks_and_usage(pair: tuple[Pair, ModelServer, VllmServer], chat: bool) -> None:
    p, _, _ = pair
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 4, "stream": True, "stream_options": {"include_usage": True}}
    body |= {"messages": [{"role": "user", "content": "Say hi"}]} if chat else {"prompt": "Once upon a time"}
    answers = await p.post("/v1/chat/completions" if chat else "/v1/completions", body)
    (sim_status, sim_type, sim_text), (real_status, real_type, real_text) = answers["sim"], answers["vllm"]
    assert (sim_status, sim_type) == (real_status, real_type)
    assert chunk_shapes(sim_text) == chunk_shapes(real_text)
    sim_usage, real_usage = (json.loads(sse_events(t)[-2])["usage"] for t in (sim_text, real_text))
    assert sim_usage == real_usage  # the same tokenizer and template: the same counts


@pytest.mark.parametrize("chat", [False, True], ids=["completions", "chat"])
async def test_json_answers_and_usage(pair: tuple[Pair, ModelServer, VllmServer], chat: bool) -> None:
    p, _, _ = pair
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 3}
    body |= {"messages": [{"role": "user", "content": "Say hi"}]} if chat else {"prompt": "Once upon a time"}
    answers = await p.post("/v1/chat/completions" if chat else "/v1/completions", body)
    sim, real = (json.loads(answers[side][2]) for side in ("sim", "vllm"))
    assert shape(sim) == shape(real)
    assert sim["usage"] == real["usage"]


async def test_tokenize_and_render_agree(pair: tuple[Pair, ModelServer, VllmServer]) -> None:
    p, _, _ = pair
    prompt = {"model": MODEL, "prompt": "The quick brown fox jumps over the lazy dog."}
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "What is a fox?"}]}
    for path, body, ids_of in (
        ("/tokenize", prompt, lambda doc: doc["tokens"]),
        ("/tokenize", chat, lambda doc: doc["tokens"]),
        ("/v1/completions/render", prompt, lambda doc: doc[0]["token_ids"]),
        ("/v1/chat/completions/render", chat, lambda doc: doc["token_ids"]),
    ):
        answers = await p.post(path, body)
        assert answers["sim"][0] == answers["vllm"][0] == 200, (path, answers)
        sim, real = (json.loads(answers[side][2]) for side in ("sim", "vllm"))
        assert shape(sim) == shape(real), path
        assert ids_of(sim) == ids_of(real), path


async def test_kv_events_fields_and_encodings(pair: tuple[Pair, ModelServer, VllmServer], epp_vllm: VllmFleet) -> None:
    p, sim, engine = pair
    assert sim.kv_events is not None
    context = zmq.asyncio.Context()
    subscribers = {"sim": context.socket(zmq.SUB), "vllm": context.socket(zmq.SUB)}
    received: dict[str, list[list[bytes]]] = {"sim": [], "vllm": []}
    try:
        for sock in subscribers.values():
            sock.setsockopt(zmq.SUBSCRIBE, b"kv@")
        subscribers["sim"].connect(sim.kv_events.endpoint)
        subscribers["vllm"].connect(f"tcp://{engine.host}:{epp_vllm.events_port}")

        async def drain() -> None:
            for side, sock in subscribers.items():
                while await sock.poll(0):
                    received[side].append(await sock.recv_multipart())

        warm = 0

        async def both_heard() -> bool:  # a subscription reaches a publisher a moment after it is made
            nonlocal warm
            warm += 1
            await p.post("/v1/completions", {"model": MODEL, "prompt": f"warm up {warm} " * 60, "max_tokens": 1})
            await drain()
            return all(received.values())

        await wait_until(both_heard, timeout=60, interval=0.5, message="events from both")
        for frames in received.values():
            frames.clear()
        story = "The lighthouse keeper counted the ships that passed each night. " * 30  # > 2 blocks of 128
        await p.post("/v1/completions", {"model": MODEL, "prompt": story, "max_tokens": 1})

        def stored(side: str) -> list[dict[str, Any]]:
            out = []
            for frames in received[side]:
                assert len(frames) == 3 and len(frames[1]) == 8
                batch = msgpack.unpackb(frames[2])
                assert isinstance(batch, list) and len(batch) == 3, "[ts, events, data_parallel_rank]"
                assert isinstance(batch[0], float) and isinstance(batch[2], int)
                out.extend(e for e in batch[1] if isinstance(e, dict) and e.get("type") == "BlockStored")
            return out

        async def story_stored() -> bool:
            await drain()
            return all(any(e["parent_block_hash"] is None for e in stored(side)) for side in received)

        await wait_until(story_stored, timeout=60, interval=0.2, message="the story's BlockStored on both")
        sim_event, real_event = (next(e for e in stored(side) if e["parent_block_hash"] is None) for side in received)
        assert {k: shape(v) for k, v in sim_event.items()} == {k: shape(v) for k, v in real_event.items()}
        same = ("token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx")
        assert {k: sim_event[k] for k in same} == {k: real_event[k] for k in same}
        assert sim_event["kv_cache_spec_kind"] == real_event["kv_cache_spec_kind"] == "full_attention"
        # DELIBERATE["block hashes"]: both 64-bit ints, one per block; their values differ.
        assert len(sim_event["block_hashes"]) == len(real_event["block_hashes"]) >= 2
        assert all(0 <= h < 2**64 for h in sim_event["block_hashes"] + real_event["block_hashes"])
    finally:
        for sock in subscribers.values():
            sock.close(linger=0)
        context.destroy(linger=0)
