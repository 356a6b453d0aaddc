"""A small real tokenizer, trained on the spot: what tests and benchmarks give the simulator and the picker.

Precise prefix routing needs the picker and the model servers to agree on token ids, as a real
deployment's do (one tokenizer.json). Nothing is downloaded: a byte-level BPE is trained with
Hugging Face ``tokenizers`` on seeded generated text and written with a ``tokenizer_config.json``
holding a chat template, so ``--tokenizer <dir>`` and ``token-producer``'s ``local.tokenizerPath``
load the very same files.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

__all__ = ["CHAT_TEMPLATE", "WORDS", "sentence", "write_tiny_tokenizer"]

WORDS = [
    "the",
    "a",
    "cache",
    "block",
    "token",
    "prefix",
    "pod",
    "route",
    "score",
    "queue",
    "model",
    "server",
    "request",
    "prompt",
    "system",
    "user",
    "assistant",
    "event",
    "index",
    "picker",
    "gateway",
    "envoy",
    "latency",
    "memory",
    "replica",
    "agree",
    "evict",
    "store",
    "remove",
    "chat",
    "answer",
    "question",
    "document",
    "context",
    "summary",
    "report",
    "table",
    "value",
    "number",
    "alpha",
    "beta",
    "gamma",
    "delta",
]

CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def sentence(rng: random.Random, words: int) -> str:
    """``words`` seeded words from :data:`WORDS`, space-separated."""
    return " ".join(rng.choice(WORDS) for _ in range(words))


def write_tiny_tokenizer(directory: Path, *, vocab_size: int = 400, seed: int = 0) -> Path:
    """Train a byte-level BPE and write ``tokenizer.json`` and ``tokenizer_config.json`` into ``directory``."""
    rng = random.Random(seed)
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator((sentence(rng, 30) for _ in range(300)), trainer)
    directory.mkdir(parents=True, exist_ok=True)
    tokenizer.save(str(directory / "tokenizer.json"))
    config = {"bos_token": "<s>", "eos_token": "</s>", "chat_template": CHAT_TEMPLATE}
    (directory / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return directory
