"""The tokenizer the KV-event tests share: a small BPE trained on generated text, nothing downloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from epp_sim.tiny_tokenizer import write_tiny_tokenizer


@pytest.fixture(scope="session")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_tokenizer(tmp_path_factory.mktemp("tokenizer"))
