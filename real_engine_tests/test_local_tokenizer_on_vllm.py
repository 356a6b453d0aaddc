"""token-producer's local tokenizer, with its prefix cache, gives real vLLM's own ids, turn after turn.

A conversation grows by a turn at a time (text with other scripts, emoji, runs of spaces and
newlines, digits, code); each turn is tokenized by a ``LocalTokenizer`` on the engine's own model
folder (SmolLM2's ``tokenizer.json`` and chat template), with chunks small enough that every turn
reuses several cached ones, and compared with vLLM's ``/v1/completions/render`` and
``/v1/chat/completions/render`` for the same text. (The engine's context is 2,048 tokens, so the
turns stay under ~1,700 tokens.)
"""

from __future__ import annotations

from typing import Any

import aiohttp

from epp.tokenize.local import LocalTokenizer
from epp.tokenize.stability import sample_texts
from epp_sim.realengine.servers import MODEL, VllmFleet, VllmServer

TURNS = 5


async def _render(http: aiohttp.ClientSession, server: VllmServer, path: str, body: dict[str, Any]) -> list[int]:
    async with http.post(f"{server.url}{path}", json={"model": MODEL, **body}) as resp:
        assert resp.status == 200, await resp.text()
        doc = await resp.json()
    ids: list[int] = (doc[0] if isinstance(doc, list) else doc)["token_ids"]
    return ids


async def test_each_turn_is_tokenized_as_vllm_does(epp_vllm: VllmFleet) -> None:
    local = LocalTokenizer(str(epp_vllm.install.model), workers=1, cache_max_tokens=1_000_000)
    assert local.cache.unstable is None  # SmolLM2's tokenizer passed the load-time proof
    local.cache.chunk_chars = 256
    server = epp_vllm.servers[0]
    pieces = sample_texts(["<|im_start|>", "<|im_end|>"], seed=3, count=TURNS + 1, pieces=45)
    text = pieces[0]
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:
            for piece in pieces[1:]:
                text += " " + piece
                ours = await local.prompt_ids(text)
                assert list(ours) == await _render(http, server, "/v1/completions/render", {"prompt": text})
                messages = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": text}]
                ours = await local.chat_ids(messages)
                assert list(ours) == await _render(http, server, "/v1/chat/completions/render", {"messages": messages})
    finally:
        local.close()
    assert local.cache.prefix_tokens > 0 and local.cache.seam_failures == 0
