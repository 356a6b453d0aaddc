"""The simulated vLLM publishes KV events as vLLM 0.32 does: its own --host, 3 frames, msgpack maps,
BlockStored with the real token ids of each full block, BlockRemoved on eviction, AllBlocksCleared
on reset, a replay socket; and it serves the render endpoints with its tokenizer."""

from __future__ import annotations

import random
import socket
from pathlib import Path

import httpx
import msgpack
import pytest
import zmq
import zmq.asyncio

from epp_sim.modelserver import ModelServer, SimConfig
from epp_sim.modelserver.kv_events import KvEventsConfig
from epp_sim.tiny_tokenizer import sentence, write_tiny_tokenizer
from epp_sim.waits import wait_until


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _tag(event: object) -> str:
    """An event's type, in either of vLLM's encodings (a map with ``type``, or ``[tag, ...]``)."""
    return str(event["type"] if isinstance(event, dict) else event[0])  # type: ignore[index]


def _field(event: object, name: str, position: int) -> list[int]:
    value = event[name] if isinstance(event, dict) else event[position]  # type: ignore[index]
    return list(value)


def test_kv_events_config_is_vllms() -> None:
    assert KvEventsConfig.parse('{"enable_kv_cache_events": true}').effective_publisher == "zmq"
    assert KvEventsConfig().effective_publisher == "null"
    assert KvEventsConfig().endpoint == "tcp://*:5557"
    assert KvEventsConfig().buffer_steps == 10_000
    with pytest.raises(ValueError, match="unknown field 'endpont'"):
        KvEventsConfig.parse('{"endpont": "tcp://*:1"}')


async def test_events_carry_token_ids_and_evictions(tmp_path: Path) -> None:
    tokenizer = write_tiny_tokenizer(tmp_path)
    port, replay_port = _free_port(), _free_port()
    events = KvEventsConfig(
        enable_kv_cache_events=True,
        endpoint=f"tcp://*:{port}",
        replay_endpoint=f"tcp://*:{replay_port}",
        topic="kv@pod@m",
    )
    config = SimConfig(model="m", tokenizer=str(tokenizer), kv_events=events, num_gpu_blocks=64, max_model_len=1024)
    context = zmq.asyncio.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    received: list[list[bytes]] = []
    try:
        async with ModelServer(config, host="127.0.0.5") as server, httpx.AsyncClient() as client:
            assert server.kv_events is not None and server.kv_events.endpoint == f"tcp://127.0.0.5:{port}"
            sub.connect(f"tcp://127.0.0.5:{port}")
            prompt = sentence(random.Random(1), 60)
            rendered = await client.post(f"{server.url}/v1/completions/render", json={"model": "m", "prompt": prompt})
            ids = rendered.json()[0]["token_ids"]
            n = 0

            async def stored() -> bool:
                nonlocal n
                n += 1
                await client.post(f"{server.url}/v1/completions", json={"prompt": f"{n} {prompt}", "max_tokens": 1})
                while await sub.poll(0):
                    received.append(await sub.recv_multipart())
                return bool(received)

            await wait_until(stored, timeout=10, message="a BlockStored event")
            await client.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 1})
            for seed in range(2, 12):  # fill the 64 blocks: the first prompts are evicted
                await client.post(
                    f"{server.url}/v1/completions", json={"prompt": sentence(random.Random(seed), 80), "max_tokens": 1}
                )
            assert (await client.post(f"{server.url}/reset_prefix_cache")).status_code == 200

            async def all_in() -> bool:
                while await sub.poll(0):
                    received.append(await sub.recv_multipart())
                return int.from_bytes(received[-1][1], "big") == server.kv_events.seq - 1  # type: ignore[union-attr]

            await wait_until(all_in, timeout=10, message="every batch")
            topic, seq, payload = received[0]
            assert topic == b"kv@pod@m" and len(seq) == 8
            batches = [msgpack.unpackb(frames[2]) for frames in received]
            tags = [event["type"] for _, events, _ in batches for event in events]
            assert {"BlockStored", "BlockRemoved", "AllBlocksCleared"} <= set(tags)
            stored_events = [e for _, events, _ in batches for e in events if e["type"] == "BlockStored"]
            ours = next(
                e
                for e in stored_events
                if e["token_ids"] == ids[: len(e["token_ids"])] and e["parent_block_hash"] is None
            )
            # vLLM 0.32's map form, every field it sends (real_engine_tests compares them with a real vLLM's).
            assert set(ours) == {
                "type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind",
            }  # fmt: skip
            hashes = ours["block_hashes"]
            assert ours["block_size"] == 16 and ours["medium"] == "GPU" and len(ours["token_ids"]) == 16 * len(hashes)
            assert ours["extra_keys"] == [None] * len(hashes) and ours["kv_cache_spec_kind"] == "full_attention"
            removed = next(e for _, events, _ in batches for e in events if e["type"] == "BlockRemoved")
            assert set(removed) == {"type", "block_hashes", "medium", "group_idx"}

            # The replay socket returns what was published from a start seq, then the end marker.
            replay = context.socket(zmq.DEALER)
            replay.connect(f"tcp://127.0.0.5:{replay_port}")
            await replay.send_multipart([b"", (0).to_bytes(8, "big")])
            first = await replay.recv_multipart()
            assert first[1] == (0).to_bytes(8, "big")
            assert msgpack.unpackb(first[2])[1], "the replayed batch holds events"
            replay.close(linger=0)
    finally:
        sub.close(linger=0)
        context.destroy(linger=0)


async def test_without_a_tokenizer_render_and_tokenize_give_the_ids_the_events_carry() -> None:
    """The default tokenization (4 characters a token) is what render, tokenize and the events all use."""
    port = _free_port()
    events = KvEventsConfig(enable_kv_cache_events=True, endpoint=f"tcp://*:{port}", topic="kv@pod@m")
    config = SimConfig(model="m", kv_events=events, max_model_len=1024)
    context = zmq.asyncio.Context()
    sub = context.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
    try:
        async with ModelServer(config, host="127.0.0.6") as server, httpx.AsyncClient() as client:
            sub.connect(f"tcp://127.0.0.6:{port}")
            prompt = sentence(random.Random(3), 60)  # several 16-token (64-character) blocks
            rendered = await client.post(f"{server.url}/v1/completions/render", json={"model": "m", "prompt": prompt})
            assert rendered.status_code == 200
            (request,) = rendered.json()
            ids = request["token_ids"]
            assert len(ids) == -(-len(prompt) // 4) and request["model"] == "m"
            tokenized = (await client.post(f"{server.url}/tokenize", json={"model": "m", "prompt": prompt})).json()
            assert tokenized == {"count": len(ids), "max_model_len": 1024, "tokens": ids, "token_strs": None}
            chat = {"model": "m", "messages": [{"role": "user", "content": prompt}]}
            chat_ids = (await client.post(f"{server.url}/v1/chat/completions/render", json=chat)).json()["token_ids"]
            assert chat_ids == (await client.post(f"{server.url}/tokenize", json=chat)).json()["tokens"]
            refused = await client.post(f"{server.url}/detokenize", json={"model": "m", "tokens": ids})
            assert refused.status_code == 400 and "--tokenizer" in refused.json()["error"]["message"]
            unknown = await client.post(f"{server.url}/tokenize", json={"model": "x", "prompt": "hi"})
            assert unknown.status_code == 404

            stored: list[list[int]] = []

            async def announced() -> bool:  # resent until the subscription has reached the publisher
                await client.post(f"{server.url}/reset_prefix_cache")
                await client.post(f"{server.url}/v1/completions", json={"prompt": prompt, "max_tokens": 1})
                while await sub.poll(0):
                    for event in msgpack.unpackb((await sub.recv_multipart())[2])[1]:
                        if _tag(event) == "BlockStored":
                            stored.append(_field(event, "token_ids", 3))
                return bool(stored)

            await wait_until(announced, timeout=10, message="the prompt's BlockStored")
            assert stored[-1] == ids[: len(stored[-1])] and len(stored[-1]) == 16 * (len(ids) // 16)
    finally:
        sub.close(linger=0)
        context.destroy(linger=0)
