"""What ``epp bench scale`` measures: its options, validated when built, and the prompts it sends.

``quick()`` is the CI smoke shape. :func:`scale_prompt_body` makes a completions request of a given
size from the tiny tokenizer's words, so a tokenizer trained on them (the default) splits it
into about one token per word, as a real tokenizer does with real text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from epp_sim.bench.backend import MAX_PODS
from epp_sim.bench.loadtools import ToolChoice
from epp_sim.tiny_tokenizer import sentence

__all__ = ["CONFIGS", "SCRAPE_MODES", "ScaleOptions", "scale_prompt_body"]

CONFIGS = ("default", "precise")
"""``default``: ``epp serve``'s defaults (approximate prefix); ``precise``: token-producer with a local
tokenizer → precise-prefix-cache-producer → prefix-cache-scorer (``epp_sim.precise_prefix``)."""

SCRAPE_MODES = ("in-loop", "process")
"""Where the default picker scrapes: on its serving loop, or in its scrape worker (``--metrics-scrape-process``).
The ``default`` configuration's CPU per request is measured on the first mode listed."""


@dataclass(frozen=True)
class ScaleOptions:
    """What to measure; ``quick()`` is the CI smoke-test shape."""

    pods: tuple[int, ...] = (100, 250, 400, 500)
    base_pods: int = 8
    idle_seconds: float = 6.0
    latency_rounds: int = 3
    round_seconds: float = 3.0
    prompt_kib: tuple[int, ...] = (4, 100, 400)
    configs: tuple[str, ...] = CONFIGS
    scrape_modes: tuple[str, ...] = SCRAPE_MODES
    concurrency: int = 4
    cpu_rounds: int = 2
    tokenizer: Path | None = None
    loadgen: ToolChoice = "auto"
    workers: tuple[int, ...] = (1, 2)
    """``epp serve --workers`` counts the precise picker is measured with (empty: not measured)."""
    worker_prompt_kib: tuple[int, ...] = (100, 400)
    worker_concurrency: int = 8

    def __post_init__(self) -> None:
        if not 1 <= self.base_pods < min(self.pods, default=0) or max(self.pods) > MAX_PODS:
            raise ValueError(f"pod counts must be above --base-pods ({self.base_pods}, >= 1) and at most {MAX_PODS}")
        if self.idle_seconds <= 0 or self.round_seconds <= 0:
            raise ValueError("idle and round seconds must be > 0")
        if self.latency_rounds < 1 or self.cpu_rounds < 1 or self.concurrency < 1:
            raise ValueError("rounds and concurrency must be >= 1")
        if not self.prompt_kib or min(self.prompt_kib) < 1:
            raise ValueError(f"prompt sizes must be >= 1 KiB, got {self.prompt_kib}")
        unknown = set(self.configs) - set(CONFIGS)
        if "default" not in self.configs or unknown:
            raise ValueError(f"configs must include default and be among {', '.join(CONFIGS)}, got {self.configs}")
        if not self.scrape_modes or set(self.scrape_modes) - set(SCRAPE_MODES):
            raise ValueError(f"scrape modes must be among {', '.join(SCRAPE_MODES)}, got {self.scrape_modes}")
        if self.workers and (min(self.workers) < 1 or 1 not in self.workers or "precise" not in self.configs):
            raise ValueError(
                f"workers must include 1 (the baseline), be >= 1 and come with the precise config: {self.workers}"
            )
        if self.workers and (
            not self.worker_prompt_kib or min(self.worker_prompt_kib) < 1 or self.worker_concurrency < 1
        ):
            raise ValueError("worker prompt sizes must be >= 1 KiB and worker concurrency >= 1")
        if self.tokenizer is not None and not (self.tokenizer / "tokenizer.json").is_file():
            raise ValueError(f"--tokenizer {self.tokenizer}: no tokenizer.json there")

    @classmethod
    def quick(cls, **overrides: Any) -> ScaleOptions:
        """Few pods, one short round of everything: proves the pipeline, not the numbers."""
        base: dict[str, Any] = {
            "pods": (12,),
            "base_pods": 2,
            "idle_seconds": 1.0,
            "latency_rounds": 1,
            "round_seconds": 1.0,
            "prompt_kib": (4,),
            "cpu_rounds": 1,
            "worker_prompt_kib": (4,),
            "worker_concurrency": 2,
        }
        base.update(overrides)
        return cls(**base)


def scale_prompt_body(kib: int) -> bytes:
    """An OpenAI completions body of about ``kib`` KiB whose prompt is the tiny tokenizer's words (seeded)."""
    rng = random.Random(kib)
    head, tail = b'{"model":"tiny-model","max_tokens":1,"prompt":"', b'"}'
    size = kib * 1024 - len(head) - len(tail)
    words: list[str] = []
    length = 0
    while length < size:
        words.append(sentence(rng, 40))
        length += len(words[-1]) + 1
    return head + " ".join(words).encode()[:size].rstrip() + tail
