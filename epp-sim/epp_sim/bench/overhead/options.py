"""What ``epp bench overhead`` measures: its options, validated when built, and the body it sends.

The options are checked once, in ``__post_init__``, so a bad flag fails before any process
starts; ``quick()`` is the shape CI runs. :func:`prompt_body` makes the completions request of
each prompt size, the same bytes for every variant.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from epp_sim.bench.loadtools import ToolChoice

__all__ = ["OverheadOptions", "prompt_body"]


@dataclass(frozen=True)
class OverheadOptions:
    """What to measure; ``quick()`` is the CI smoke-test shape."""

    endpoints: int = 8
    concurrencies: tuple[int, ...] = (1, 4, 16, 64)
    prompt_bytes: tuple[int, ...] = (1024, 220 * 1024)
    rounds: int = 3
    round_seconds: float = 2.0
    grpc_concurrency: int = 16
    scrape_endpoints: tuple[int, ...] = (8, 64)
    scrape_seconds: float = 3.0
    loadgen: ToolChoice = "auto"
    profile_seconds: float = 0.0
    soak_seconds: float = 0.0
    soak_sample_seconds: float = 10.0  # one chunk of load per (processor, Envoy) pair between RSS samples

    def __post_init__(self) -> None:
        if not 1 <= self.endpoints <= 200 or any(not 1 <= n <= 200 for n in self.scrape_endpoints):
            raise ValueError("endpoint counts must be within 1..200 (127.0.0.2 … 127.0.0.201)")
        if not self.concurrencies or min(self.concurrencies) < 1 or self.grpc_concurrency < 1:
            raise ValueError(f"concurrencies must be >= 1, got {self.concurrencies}")
        if not self.prompt_bytes or min(self.prompt_bytes) < 64:
            raise ValueError(f"prompt sizes must be >= 64 bytes, got {self.prompt_bytes}")
        if self.rounds < 1 or self.round_seconds <= 0:
            raise ValueError("rounds must be >= 1 and round seconds > 0")
        if self.profile_seconds < 0 or self.soak_seconds < 0:
            raise ValueError("profile and soak seconds must be >= 0")

    @classmethod
    def quick(cls, **overrides: Any) -> OverheadOptions:
        """One concurrency, one small prompt, one 1-second round: proves the pipeline, not the numbers."""
        base: dict[str, Any] = {
            "endpoints": 2,
            "concurrencies": (4,),
            "prompt_bytes": (1024,),
            "rounds": 1,
            "round_seconds": 1.0,
            "grpc_concurrency": 4,
            "scrape_endpoints": (2,),
            "scrape_seconds": 1.0,
            "soak_seconds": 10.0,
            "soak_sample_seconds": 1.0,
        }
        base.update(overrides)
        return cls(**base)


def prompt_body(size: int) -> bytes:
    """An OpenAI completions body of about ``size`` bytes (deterministic text)."""
    head, tail = b'{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":1,"prompt":"', b'"}'
    words = b"the quick brown fox jumps over the lazy dog "
    filler = (words * (size // len(words) + 1))[: max(1, size - len(head) - len(tail))]
    return head + filler + tail
