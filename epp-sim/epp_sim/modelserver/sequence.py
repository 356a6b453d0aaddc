"""One request inside the simulated engine: what the caller asked for, its progress, and its handle.

``Seq`` is the engine's per-request state (prompt blocks, KV holding, progress, timestamps);
``RequestHandle`` is what the HTTP layer holds: it awaits tokens as the engine produces them and
aborts the request if the client goes away.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass

from .prefix_cache import KvHolding

__all__ = [
    "EngineStoppedError",
    "GenerationRequest",
    "InvalidRequestError",
    "RequestHandle",
    "Seq",
    "SeqState",
    "prompt_too_long",
]


class EngineStoppedError(RuntimeError):
    """The engine stopped while the request was in flight."""


def prompt_too_long(count: int, limit: int) -> InvalidRequestError:
    """vLLM 0.32's refusal of a prompt over the context. Text is tokenized truncated at ``limit + 1``
    tokens, so for text it can only say "at least" that many."""
    qualifier = "at least " if count == limit + 1 else ""
    return InvalidRequestError(
        f"This model's maximum context length is {limit} tokens. However, your prompt contains "
        f"{qualifier}{count} input tokens, which exceeds this limit even without any output tokens. "
        f"Please reduce the length of the input prompt. (parameter=input_tokens, value={count})",
        param="input_tokens",
    )


class InvalidRequestError(ValueError):
    """A request the engine cannot serve (too long for the context, bad parameters).

    ``param`` names the request field at fault (OpenAI's ``error.param``), when there is one.
    """

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True, slots=True)
class GenerationRequest:
    """What the engine needs from one completion request."""

    prompt: str | Sequence[int]
    #: adapter name, or None for the base model
    adapter: str | None = None
    #: exact output length (finish reason ``length``); None → seeded length, finish reason ``stop``
    max_tokens: int | None = None
    n: int = 1
    seed: int | None = None
    #: wake the consumer on every token (streaming) rather than only at the end
    stream: bool = False
    #: disaggregated serving, prefill role: prefill only, for a decode pod to pull (finish reason ``remote_decode``)
    remote_decode: bool = False
    #: disaggregated serving, decode role: the prompt's KV comes from a prefill pod (no local prefill)
    remote_prefill: bool = False
    #: shared-storage connector: finish at once (``cache_threshold``) when less of the prompt than this is cached
    cache_hit_threshold: float | None = None


class SeqState(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    FINISHED = "finished"


class Seq:
    __slots__ = (
        "adapter",
        "arrival",
        "cached_tokens",
        "computed",
        "event",
        "finish_reason",
        "finished_at",
        "first_token_at",
        "generated",
        "hashes",
        "holding",
        "last_token_at",
        "max_tokens",
        "n",
        "prefill_len",
        "preemptions",
        "prompt_tokens",
        "remote_decode",
        "remote_prefill",
        "scheduled_at",
        "seed",
        "state",
        "stopped",
        "stream",
        "target",
        "tokens",
        "transfer_until",
        "transferred_tokens",
    )

    def __init__(
        self,
        *,
        prompt_tokens: int,
        hashes: list[int],
        target: int,
        req: GenerationRequest,
        seed: int,
        tokens: Sequence[int] | None = None,
    ) -> None:
        self.adapter = req.adapter
        #: the prompt's token ids (a text prompt's default tokenization when events need them): BlockStored's
        self.tokens: Sequence[int] | None = tokens if isinstance(req.prompt, str) else req.prompt
        self.max_tokens = req.max_tokens
        self.n = req.n
        self.stream = req.stream
        self.seed = seed
        self.prompt_tokens = prompt_tokens
        self.hashes = hashes
        self.target = target
        self.prefill_len = prompt_tokens  # tokens to compute before the next sample (grows on preemption)
        self.computed = 0  # tokens whose KV is in the cache
        self.generated = 0
        self.cached_tokens = 0
        self.preemptions = 0
        self.holding = KvHolding()
        self.state = SeqState.WAITING
        self.arrival = 0.0
        self.scheduled_at: float | None = None
        self.first_token_at: float | None = None
        self.last_token_at = 0.0
        self.finished_at: float | None = None
        self.finish_reason: str | None = None
        self.stopped = False
        self.event = asyncio.Event()
        self.remote_decode = req.remote_decode
        self.remote_prefill = req.remote_prefill
        self.transfer_until: float | None = None  # while its KV is being pulled from the prefill pod
        self.transferred_tokens = 0


class RequestHandle:
    """The caller's view of one submitted request: tokens as they are produced, then usage."""

    __slots__ = ("_abort", "_consumed", "_seq")

    def __init__(self, seq: Seq, abort: Callable[[Seq], None]) -> None:
        self._seq = seq
        self._abort = abort
        self._consumed = 0

    @property
    def prompt_tokens(self) -> int:
        return self._seq.prompt_tokens

    @property
    def completion_tokens(self) -> int:
        """Tokens generated so far (per choice)."""
        return self._seq.generated

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache when the request was first scheduled."""
        return self._seq.cached_tokens

    @property
    def finish_reason(self) -> str | None:
        return self._seq.finish_reason

    @property
    def transferred_tokens(self) -> int:
        """Prompt tokens whose KV was pulled from a prefill pod (a remote prefill's)."""
        return self._seq.transferred_tokens

    @property
    def hashes(self) -> list[int]:
        """The prompt's full-block hashes: the blocks a prefill pod offers for a remote decode."""
        return self._seq.hashes

    @property
    def seed(self) -> int:
        """The effective seed (the request's, or one derived from the prompt) for output text."""
        return self._seq.seed

    @property
    def done(self) -> bool:
        return self._seq.state is SeqState.FINISHED

    @property
    def ttft(self) -> float | None:
        """Simulated seconds from arrival to the first token, once there is one."""
        first = self._seq.first_token_at
        return None if first is None else first - self._seq.arrival

    async def tokens(self) -> AsyncIterator[int]:
        """Yield how many new tokens are ready each time some are; ends when the request finishes."""
        seq = self._seq
        while True:
            if seq.generated > self._consumed:
                n = seq.generated - self._consumed
                self._consumed = seq.generated
                yield n
                continue
            if seq.state is SeqState.FINISHED:
                if seq.stopped:
                    raise EngineStoppedError("the model server is shutting down")
                return
            seq.event.clear()
            await seq.event.wait()

    async def wait(self) -> None:
        """Wait until the request has finished."""
        seq = self._seq
        while seq.state is not SeqState.FINISHED:
            seq.event.clear()
            await seq.event.wait()
        if seq.stopped:
            raise EngineStoppedError("the model server is shutting down")

    def abort(self) -> None:
        """Drop the request (client went away); frees its KV blocks. No-op once finished."""
        self._abort(self._seq)
