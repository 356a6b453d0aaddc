"""``epp dev --load``: a short, seeded, mixed workload through Envoy, so the routing is visible.

The mix is chosen to exercise each part of the default scheduling profile: chat completions
that open with one of a few long shared system prompts (prefix-cache affinity: requests with the
same prompt should keep landing on the same pods), requests for the rewritten LoRA model
(``food-review`` → adapters; LoRA affinity), requests naming an InferenceObjective in
``x-gateway-inference-objective`` (``sheddable`` ones may be answered 429 under saturation),
and streaming requests (SSE read to the end). Concurrency and duration are bounded; the report
counts responses by status and by kind.

:func:`plan_requests` is pure (seeded), :func:`run_load` does the I/O with aiohttp.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

import aiohttp

from epp.framework.headers import OBJECTIVE

__all__ = ["LoadConfig", "LoadReport", "PlannedRequest", "plan_requests", "run_load"]

_CHAT_PATH = "/v1/chat/completions"

# Long enough (~1.5 KB, ~24 blocks of 16 tokens at 4 characters a token) that a prefix-cache hit
# is worth something to the scorer.
_TOPICS = ("a travel agency", "a bank's support desk", "a cooking school")
_SYSTEM_PROMPTS = tuple(
    f"You are the assistant of {topic}. "
    + " ".join(f"Rule {i}: answer politely, briefly and accurately." for i in range(30))
    for topic in _TOPICS
)
_QUESTIONS = (
    "What can you help me with today?",
    "Summarise your rules in one sentence.",
    "Give me three ideas for the weekend.",
    "How long does it usually take?",
    "What should I prepare beforehand?",
    "Is there anything I should avoid?",
    "Can you explain that again, more simply?",
    "What is the most common mistake people make?",
)
_REVIEWS = ("The soup was cold.", "Best pasta in town!", "Service was slow but friendly.", "Too salty for me.")


@dataclass(frozen=True, slots=True)
class LoadConfig:
    """What to send; validated when built. Fractions are independent probabilities per request."""

    model: str
    lora_models: tuple[str, ...] = ()
    objectives: tuple[str, ...] = ()
    duration: float = 20.0
    concurrency: int = 8
    seed: int = 0
    stream_fraction: float = 0.25
    lora_fraction: float = 0.25
    objective_fraction: float = 0.3
    min_tokens: int = 8
    max_tokens: int = 64
    request_timeout: float = 60.0

    def __post_init__(self) -> None:
        if not self.model:
            raise ValueError("model must be a non-empty name")
        if not self.duration > 0:
            raise ValueError(f"duration must be positive seconds, got {self.duration!r}")
        if isinstance(self.concurrency, bool) or not isinstance(self.concurrency, int) or self.concurrency < 1:
            raise ValueError(f"concurrency must be a positive integer, got {self.concurrency!r}")
        for name in ("stream_fraction", "lora_fraction", "objective_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        if not 1 <= self.min_tokens <= self.max_tokens:
            raise ValueError(f"need 1 <= min_tokens <= max_tokens, got {self.min_tokens} and {self.max_tokens}")
        if not self.request_timeout > 0:
            raise ValueError(f"request_timeout must be positive seconds, got {self.request_timeout!r}")


@dataclass(frozen=True, slots=True)
class PlannedRequest:
    """One request of the workload: its kind (for the report), JSON body and extra headers."""

    kind: str
    body: bytes
    headers: dict[str, str]
    stream: bool


def plan_requests(config: LoadConfig) -> Iterator[PlannedRequest]:
    """An endless, seeded sequence of requests (the same config gives the same sequence)."""
    rng = random.Random(config.seed)
    while True:
        lora = bool(config.lora_models) and rng.random() < config.lora_fraction
        stream = rng.random() < config.stream_fraction
        objective = (
            rng.choice(config.objectives) if config.objectives and rng.random() < config.objective_fraction else None
        )
        if lora:
            model = rng.choice(config.lora_models)
            messages = [{"role": "user", "content": f"Classify this review: {rng.choice(_REVIEWS)}"}]
        else:
            model = config.model
            messages = [
                {"role": "system", "content": rng.choice(_SYSTEM_PROMPTS)},
                {"role": "user", "content": rng.choice(_QUESTIONS)},
            ]
        body: dict[str, object] = {
            "model": model,
            "messages": messages,
            "max_tokens": rng.randint(config.min_tokens, config.max_tokens),
        }
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        kind = "lora" if lora else "chat"
        headers = {"content-type": "application/json"}
        if objective is not None:
            headers[OBJECTIVE] = objective
            kind += f"+{objective}"
        if stream:
            kind += "+stream"
        yield PlannedRequest(kind, json.dumps(body).encode(), headers, stream)


@dataclass(slots=True)
class LoadReport:
    """Responses by status (``"200"``, ``"429"``, ``"error:<exception>"``) and requests by kind."""

    by_status: Counter[str] = field(default_factory=Counter)
    by_kind: Counter[str] = field(default_factory=Counter)
    elapsed: float = 0.0

    @property
    def sent(self) -> int:
        return sum(self.by_kind.values())

    def summary(self) -> str:
        """A few human lines: totals, statuses, kinds."""
        statuses = ", ".join(f"{status}: {n}" for status, n in sorted(self.by_status.items()))
        kinds = ", ".join(f"{kind}: {n}" for kind, n in sorted(self.by_kind.items()))
        rate = self.sent / self.elapsed if self.elapsed > 0 else 0.0
        return (
            f"load: {self.sent} requests in {self.elapsed:.1f}s ({rate:.1f}/s)\n"
            f"  by status: {statuses or '-'}\n"
            f"  by kind:   {kinds or '-'}"
        )


async def _send(session: aiohttp.ClientSession, url: str, request: PlannedRequest) -> str:
    """Send one request and read the whole response (the SSE stream to its end); its status as text."""
    try:
        async with session.post(url, data=request.body, headers=request.headers) as resp:
            if request.stream and resp.status == 200:
                async for _ in resp.content.iter_any():
                    pass
            else:
                await resp.read()
            return str(resp.status)
    except (aiohttp.ClientError, TimeoutError) as e:
        return f"error:{type(e).__name__}"


async def run_load(base_url: str, config: LoadConfig) -> LoadReport:
    """Drive ``config.concurrency`` workers for ``config.duration`` seconds; in-flight requests finish."""
    url = base_url.rstrip("/") + _CHAT_PATH
    report = LoadReport()
    plans = plan_requests(config)
    loop = asyncio.get_running_loop()
    start = time.monotonic()
    deadline = loop.time() + config.duration

    async def worker(session: aiohttp.ClientSession) -> None:
        while loop.time() < deadline:
            request = next(plans)
            report.by_kind[request.kind] += 1
            report.by_status[await _send(session, url, request)] += 1

    timeout = aiohttp.ClientTimeout(total=config.request_timeout)
    connector = aiohttp.TCPConnector(limit=config.concurrency)
    async with aiohttp.ClientSession(timeout=timeout, connector=connector) as session, asyncio.TaskGroup() as tg:
        for i in range(config.concurrency):
            tg.create_task(worker(session), name=f"epp-dev-load-{i}")
    report.elapsed = time.monotonic() - start
    return report
