"""The local tokenizer: the same ids as the tokenizer's plain encode, on its own threads, without stalling the loop."""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from epp.framework.plugin import PluginConfigError
from epp.tokenize.local import LocalTokenizer, TokenizationError
from epp_sim.tiny_tokenizer import sentence


@pytest.fixture
def tokenizer(tokenizer_dir: Path) -> LocalTokenizer:
    return LocalTokenizer(str(tokenizer_dir), workers=2)


async def test_ids_are_the_tokenizers_own(tokenizer: LocalTokenizer, tokenizer_dir: Path) -> None:
    from tokenizers import Tokenizer

    reference = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    text = sentence(random.Random(1), 300)
    try:
        ids = await tokenizer.prompt_ids(text)
        assert list(ids) == reference.encode(text).ids
        chat = await tokenizer.chat_ids([{"role": "user", "content": text}])
        rendered = "<s><|user|>" + text + "\n<|assistant|>"  # the tiny tokenizer's chat template
        assert list(chat) == reference.encode(rendered, add_special_tokens=False).ids
    finally:
        tokenizer.close()


async def test_encodes_run_on_the_pools_threads(tokenizer: LocalTokenizer) -> None:
    seen: set[str] = set()
    encode = tokenizer.encode_prompt

    def recording(prompt: str):  # type: ignore[no-untyped-def]
        seen.add(threading.current_thread().name)
        return encode(prompt)

    tokenizer.encode_prompt = recording  # type: ignore[method-assign]
    try:
        await asyncio.gather(*(tokenizer.prompt_ids(f"prompt {i}") for i in range(8)))
    finally:
        tokenizer.close()
    assert seen and all(name.startswith("epp-tokenize") for name in seen)


async def _loop_turns_during(work: Callable[[], Awaitable[object]]) -> int:
    """How many times the event loop came round while ``work`` ran on another thread."""
    turns = 0
    done = False

    async def ticker() -> None:
        nonlocal turns
        while not done:
            turns += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    try:
        await work()
    finally:
        done = True
        await task
    return turns


async def test_the_event_loop_keeps_running_while_a_long_prompt_tokenizes(
    tokenizer: LocalTokenizer, tokenizer_dir: Path
) -> None:
    """The control is the tokenizer's own ``encode``, which holds the GIL for the whole call."""
    from tokenizers import Tokenizer

    plain = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    text = sentence(random.Random(2), 200_000)  # ~1.3 MB: hundreds of milliseconds of encoding
    try:
        pooled = await _loop_turns_during(lambda: tokenizer.prompt_ids(text))
        held = await _loop_turns_during(lambda: asyncio.to_thread(plain.encode, text))
    finally:
        tokenizer.close()
    assert pooled > 10 * max(held, 1), (pooled, held)


async def test_refusals(tokenizer_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(PluginConfigError, match="workers"):
        LocalTokenizer(str(tokenizer_dir), workers=0)
    with pytest.raises(PluginConfigError, match="here.path: cannot load"):
        LocalTokenizer(str(tmp_path / "missing.json"), where="here.path")
    (tmp_path / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())
    no_template = LocalTokenizer(str(tmp_path))
    with pytest.raises(TokenizationError, match="chat_template"):
        await no_template.chat_ids([{"role": "user", "content": "hi"}])
    no_template.close()


async def test_a_chat_template_jinja_file_beside_the_tokenizer_renders_chat(
    tokenizer_dir: Path, tmp_path: Path
) -> None:
    """Newer transformers save the template as ``chat_template.jinja`` (SmolLM2's folder has no other)."""
    from tokenizers import Tokenizer

    (tmp_path / "tokenizer.json").write_bytes((tokenizer_dir / "tokenizer.json").read_bytes())
    (tmp_path / "chat_template.jinja").write_text(
        "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}\n"
    )
    local = LocalTokenizer(str(tmp_path))
    try:
        ids = await local.chat_ids([{"role": "user", "content": "the cache"}])
    finally:
        local.close()
    reference = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    assert list(ids) == reference.encode("<|user|>the cache\n", add_special_tokens=False).ids
