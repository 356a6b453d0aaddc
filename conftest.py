"""Shared by tests/ and hermetic_tests/: no test may leave an asyncio task running; the tiny tokenizer.

``tokenizer_dir`` is the tokenizer the KV-event, tokenization and precise-routing tests share (a
small BPE trained on generated text once per session, nothing downloaded).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from epp_sim.tiny_tokenizer import write_tiny_tokenizer

pytest_plugins = ["pytester"]  # tests of epp-sim's pytest plugin run pytest on files they write


@pytest.fixture(autouse=True)
async def _no_leaked_tasks() -> AsyncIterator[None]:
    before = set(asyncio.all_tasks())
    yield
    current = asyncio.current_task()
    for _ in range(100):
        leaked = {t for t in asyncio.all_tasks() - before if t is not current and not t.done()}
        if not leaked:
            return
        await asyncio.sleep(0.01)
    names = sorted(t.get_name() for t in leaked)
    for t in leaked:
        t.cancel()
    pytest.fail(f"test leaked asyncio tasks: {names}")


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))
