"""Seeded workload generators for the routing benchmark: the same arrivals for every strategy.

A workload turns ``(rate, duration, seed)`` into a sorted list of :class:`Arrival` (simulated
seconds from the start, an OpenAI chat body already serialised, headers). Everything derives from
``random.Random(seed)``, so every strategy is offered exactly the same requests at exactly the
same times, and a run replays.

Three workloads, each a mix real clusters see:

- ``shared-prefix``: many tenants, each with a long system prompt (RAG context, agent
  instructions) and short unique questions; the system prompts together exceed one server's KV
  cache but fit in the cluster's, which is where prefix-aware routing pays.
- ``chat-mix``: multi-turn chat sessions (each turn resends the whole conversation, think time
  between turns), a LoRA adapter mix (a Zipf-weighted set of adapters besides the base model; a
  session keeps its adapter) and a sheddable fraction (``x-gateway-inference-objective`` naming
  an objective with priority −1).
- ``bursty``: requests arrive in bursts (a batch job, an agent fanning out tool calls), several
  within a few milliseconds, each a unique long prompt: no prefix to share, so only load
  decides, and a burst lands between two scrapes of the servers' queues.
- ``cache-pressure``: more tenants' system prompts than the whole cluster's KV cache holds, so
  servers evict in steady state; written in the words of :mod:`epp_sim.tiny_tokenizer` (one
  token each with the bench's tokenizer), for precise prefix routing, which needs real token ids.
- ``pd-mix``: long unique prompts (documents to summarise, code to review) mixed with short chat
  turns, each with a long answer: on an aggregated pod the long prompts' prefill chunks land in
  the steps of every sequence decoding there, which is what disaggregated serving avoids.

Tokens are counted as the simulator counts them: 4 characters each (one per word for
``cache-pressure``, whose cluster runs the bench tokenizer). :func:`capacity` is the
request rate that would use every server's whole prefill budget if no prompt token were ever
cached: offered loads are given as fractions of it.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from epp.framework.headers import FAIRNESS_ID, OBJECTIVE, TPOT_SLO, TTFT_SLO
from epp_sim.tiny_tokenizer import sentence

__all__ = [
    "ADAPTERS",
    "BASE_MODEL",
    "CRITICAL_OBJECTIVE",
    "DEFAULT_WORKLOADS",
    "SHEDDABLE_OBJECTIVE",
    "WORKLOADS",
    "Arrival",
    "Workload",
    "bursty",
    "cache_pressure",
    "capacity",
    "chat_mix",
    "overload",
    "pd_mix",
    "shared_prefix",
    "slo_mix",
]

BASE_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
ADAPTERS = ("sql-lora", "summarize-lora", "tweet-lora", "code-lora")
SHEDDABLE_OBJECTIVE = "batch"
CRITICAL_OBJECTIVE = "interactive"
"""The objectives the bench pool holds: ``batch`` priority −1 (sheddable), ``interactive`` priority 10."""
CHARS_PER_TOKEN = 4

_WORDS = [
    "model",
    "cluster",
    "request",
    "token",
    "cache",
    "prefix",
    "server",
    "latency",
    "queue",
    "batch",
    "decode",
    "prefill",
    "adapter",
    "gateway",
    "route",
    "pool",
    "endpoint",
    "metric",
    "policy",
    "tenant",
    "answer",
    "context",
    "document",
    "section",
    "table",
    "value",
    "system",
    "user",
    "assistant",
    "question",
    "result",
    "summary",
    "detail",
    "example",
    "reason",
    "number",
    "record",
    "field",
]


@dataclass(frozen=True, slots=True)
class Arrival:
    """One request of a workload: when it arrives (simulated s) and what it sends."""

    at: float
    model: str
    body: dict[str, object]
    data: bytes
    headers: dict[str, str]
    group: str
    """System-prompt group or chat session: requests that share a prompt prefix."""
    prompt_tokens: int
    max_tokens: int

    @property
    def sheddable(self) -> bool:
        return self.headers.get(OBJECTIVE) == SHEDDABLE_OBJECTIVE

    @property
    def service_class(self) -> str:
        """``critical``, ``sheddable`` or ``standard``, from the objective the request names."""
        objective = self.headers.get(OBJECTIVE)
        if objective == CRITICAL_OBJECTIVE:
            return "critical"
        return "sheddable" if objective == SHEDDABLE_OBJECTIVE else "standard"

    @property
    def slo_ms(self) -> tuple[float, float]:
        """The request's TTFT and TPOT objectives in simulated ms (0: none)."""
        return float(self.headers.get(TTFT_SLO, 0)), float(self.headers.get(TPOT_SLO, 0))

    @property
    def tenant(self) -> str:
        """The fairness id the request sends (``default-flow`` when none)."""
        return self.headers.get(FAIRNESS_ID, "default-flow")


def _text(rng: random.Random, tokens: int) -> str:
    """About ``tokens`` simulator tokens of deterministic words."""
    out: list[str] = []
    size = 0
    target = tokens * CHARS_PER_TOKEN
    while size < target:
        word = rng.choice(_WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)[:target]


def _prompt_tokens(messages: Sequence[dict[str, str]]) -> int:
    # The simulator renders "<|role|>\ncontent\n" per message, then "<|assistant|>\n".
    chars = sum(len(m["role"]) + len(m["content"]) + 6 for m in messages) + len("<|assistant|>\n")
    return math.ceil(chars / CHARS_PER_TOKEN)


def _arrival(
    at: float,
    model: str,
    messages: list[dict[str, str]],
    max_tokens: int,
    group: str,
    *,
    sheddable: bool = False,
    headers: dict[str, str] | None = None,
    prompt_tokens: int | None = None,
) -> Arrival:
    body: dict[str, object] = {
        "model": model,
        "messages": messages,
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    headers = headers if headers is not None else {OBJECTIVE: SHEDDABLE_OBJECTIVE} if sheddable else {}
    return Arrival(
        at=at,
        model=model,
        body=body,
        data=json.dumps(body, separators=(",", ":")).encode(),
        headers=headers,
        group=group,
        prompt_tokens=_prompt_tokens(messages) if prompt_tokens is None else prompt_tokens,
        max_tokens=max_tokens,
    )


def _poisson(rng: random.Random, rate: float, duration: float) -> list[float]:
    times: list[float] = []
    t = rng.expovariate(rate)
    while t < duration:
        times.append(t)
        t += rng.expovariate(rate)
    return times


def shared_prefix(
    rate: float,
    duration: float,
    seed: int,
    *,
    groups: int = 48,
    system_tokens: int = 3000,
    question_tokens: int = 120,
    output_tokens: tuple[int, int] = (16, 48),
) -> list[Arrival]:
    """Poisson arrivals; each picks a tenant uniformly and asks a fresh question under its system prompt."""
    return _tenant_questions(
        rate, duration, seed, groups, system_tokens, question_tokens, output_tokens, text=_text, tag="[tenant {}] "
    )


def cache_pressure(
    rate: float,
    duration: float,
    seed: int,
    *,
    groups: int = 160,
    system_tokens: int = 1000,
    question_tokens: int = 50,
    output_tokens: tuple[int, int] = (16, 48),
) -> list[Arrival]:
    """Poisson arrivals over ``groups`` tenants chosen uniformly: their prompts outgrow the cluster's cache.

    Text is :func:`~epp_sim.tiny_tokenizer.sentence` words, one token each with the bench's
    tokenizer (``write_tiny_tokenizer(vocab_size=1000)``), so ``prompt_tokens`` counts words.
    """
    return _tenant_questions(
        rate,
        duration,
        seed,
        groups,
        system_tokens,
        question_tokens,
        output_tokens,
        text=sentence,
        tag="tenant {} ",
        text_salt=3,
        counted=system_tokens + question_tokens + 8,  # tenant tag, chat template
    )


def _tenant_questions(
    rate: float,
    duration: float,
    seed: int,
    groups: int,
    system_tokens: int,
    question_tokens: int,
    output_tokens: tuple[int, int],
    *,
    text: Callable[[random.Random, int], str],
    tag: str,
    text_salt: int = 1,
    counted: int | None = None,
) -> list[Arrival]:
    """Tenants' system prompts (``tag`` names the tenant) and a fresh question under one per arrival."""
    texts = random.Random(seed * 7919 + text_salt)
    systems = [tag.format(g) + text(texts, system_tokens) for g in range(groups)]
    rng = random.Random(seed)
    arrivals = []
    for at in _poisson(rng, rate, duration):
        g = rng.randrange(groups)
        messages = [
            {"role": "system", "content": systems[g]},
            {"role": "user", "content": text(rng, question_tokens)},
        ]
        output = rng.randint(*output_tokens)
        arrivals.append(_arrival(at, BASE_MODEL, messages, output, f"tenant-{g}", prompt_tokens=counted))
    return arrivals


@dataclass
class _Session:
    model: str
    sheddable: bool
    messages: list[dict[str, str]] = field(default_factory=list)


def chat_mix(
    rate: float,
    duration: float,
    seed: int,
    *,
    turns: tuple[int, int] = (2, 6),
    think_time: float = 4.0,
    system_prompts: int = 8,
    system_tokens: int = 1200,
    user_tokens: tuple[int, int] = (40, 200),
    reply_tokens: tuple[int, int] = (24, 96),
    adapter_share: float = 0.5,
    sheddable_share: float = 0.2,
) -> list[Arrival]:
    """Multi-turn sessions (Poisson session starts, exponential think time), LoRA mix, sheddable share.

    The request rate is ``rate`` on average: sessions start at ``rate / mean turns``. A turn's
    prompt is the whole conversation so far, the earlier replies included (as generated here,
    since an open-loop workload cannot wait for the server's text).
    """
    texts = random.Random(seed * 7919 + 2)
    systems = [f"[assistant {i}] " + _text(texts, system_tokens) for i in range(system_prompts)]
    rng = random.Random(seed)
    zipf = [1.0 / (i + 1) for i in range(len(ADAPTERS))]
    mean_turns = (turns[0] + turns[1]) / 2
    arrivals: list[Arrival] = []
    for index, start in enumerate(_poisson(rng, rate / mean_turns, duration)):
        model = rng.choices(ADAPTERS, weights=zipf)[0] if rng.random() < adapter_share else BASE_MODEL
        session = _Session(model=model, sheddable=rng.random() < sheddable_share)
        session.messages.append({"role": "system", "content": rng.choice(systems)})
        at = start
        for _ in range(rng.randint(*turns)):
            if at >= duration:
                break
            session.messages.append({"role": "user", "content": _text(rng, rng.randint(*user_tokens))})
            reply = rng.randint(*reply_tokens)
            arrivals.append(
                _arrival(at, model, list(session.messages), reply, f"session-{index}", sheddable=session.sheddable)
            )
            session.messages.append({"role": "assistant", "content": _text(rng, reply)})
            at += rng.expovariate(1.0 / think_time)
    arrivals.sort(key=lambda a: a.at)
    return arrivals


def overload(
    rate: float,
    duration: float,
    seed: int,
    *,
    tenant_shares: tuple[float, ...] = (0.7, 0.1, 0.1, 0.1),
    critical_share: float = 0.4,
    prompt_tokens: int = 400,
    output_tokens: tuple[int, int] = (16, 48),
) -> list[Arrival]:
    """Poisson arrivals from four tenants (one sends 70%), 40% critical and 60% sheddable.

    Each request names its tenant in the fairness header and its class by objective
    (``interactive``, priority 10, or ``batch``, priority −1). Prompts are unique, so nothing is
    cached and the capacity estimate (:func:`capacity`) is what the servers can really do: a
    load of 1.5 is 50% more than they can serve.
    """
    rng = random.Random(seed)
    arrivals = []
    for at in _poisson(rng, rate, duration):
        t = rng.choices(range(len(tenant_shares)), weights=tenant_shares)[0]
        objective = CRITICAL_OBJECTIVE if rng.random() < critical_share else SHEDDABLE_OBJECTIVE
        messages = [{"role": "user", "content": _text(rng, prompt_tokens)}]
        headers = {OBJECTIVE: objective, FAIRNESS_ID: f"tenant-{t}"}
        tokens = rng.randint(*output_tokens)
        arrivals.append(_arrival(at, BASE_MODEL, messages, tokens, f"tenant-{t}", headers=headers))
    return arrivals


def bursty(
    rate: float,
    duration: float,
    seed: int,
    *,
    burst: tuple[int, int] = (4, 12),
    spread: float = 0.02,
    prompt_tokens: tuple[int, int] = (1500, 4500),
    output_tokens: tuple[int, int] = (16, 48),
) -> list[Arrival]:
    """Poisson bursts of ``burst`` requests spread over ``spread`` seconds; ``rate`` requests/s on average.

    Every prompt is unique from its first token (``[request n]``), so no server ever has a
    prefix cached and where a request goes matters only for the load it adds.
    """
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    for start in _poisson(rng, rate / ((burst[0] + burst[1]) / 2), duration):
        for _ in range(rng.randint(*burst)):
            at = start + rng.uniform(0.0, spread)
            if at >= duration:
                continue
            index = len(arrivals)
            text = f"[request {index}] " + _text(rng, rng.randint(*prompt_tokens))
            messages = [{"role": "user", "content": text}]
            arrivals.append(_arrival(at, BASE_MODEL, messages, rng.randint(*output_tokens), f"request-{index}"))
    arrivals.sort(key=lambda a: a.at)
    return arrivals


def pd_mix(
    rate: float,
    duration: float,
    seed: int,
    *,
    long_share: float = 0.5,
    long_tokens: tuple[int, int] = (3000, 7000),
    short_tokens: tuple[int, int] = (100, 300),
    output_tokens: tuple[int, int] = (128, 384),
    slo_ms: tuple[float, float] = (1000.0, 50.0),
) -> list[Arrival]:
    """Poisson arrivals: ``long_share`` of them unique long prompts, the rest short ones, all with long answers.

    Every prompt starts with its own request number, so nothing is cached: a long prompt always
    needs its whole prefill (on a prefill pod, with P/D), a short one is decoded where it lands.
    Every request states the same objectives (``slo_ms``: TTFT and TPOT, simulated ms), which the
    P/D configuration does not read: they say which requests count in the SLO goodput.
    """
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    headers = {TTFT_SLO: f"{slo_ms[0]:g}", TPOT_SLO: f"{slo_ms[1]:g}"}
    for at in _poisson(rng, rate, duration):
        index = len(arrivals)
        size = long_tokens if rng.random() < long_share else short_tokens
        text = f"[request {index}] " + _text(rng, rng.randint(*size))
        messages = [{"role": "user", "content": text}]
        arrivals.append(
            _arrival(at, BASE_MODEL, messages, rng.randint(*output_tokens), f"request-{index}", headers=dict(headers))
        )
    return arrivals


def slo_mix(
    rate: float,
    duration: float,
    seed: int,
    *,
    interactive_share: float = 0.5,
    slo_ms: tuple[float, float] = (250.0, 50.0),
    interactive: tuple[tuple[int, int], tuple[int, int]] = ((100, 400), (16, 64)),
    batch: tuple[tuple[int, int], tuple[int, int]] = ((1000, 2500), (32, 128)),
) -> list[Arrival]:
    """Two classes on one pool: interactive chat with TTFT / TPOT objectives, batch jobs without.

    Interactive requests (``interactive_share`` of them; objective ``interactive``) are short
    prompts with ``x-llm-d-slo-ttft-ms`` and ``x-llm-d-slo-tpot-ms`` (``slo_ms``, simulated ms);
    batch requests (objective ``batch``, sheddable) are long documents with longer answers and no
    objective. A batch prompt's prefill stalls every sequence decoding on its server for a step of
    a few hundred ms, so where each interactive request lands decides whether it meets its SLO.
    Every prompt is unique: only load decides.
    """
    rng = random.Random(seed)
    arrivals: list[Arrival] = []
    for at in _poisson(rng, rate, duration):
        index = len(arrivals)
        if rng.random() < interactive_share:
            (low, high), out = interactive
            headers = {OBJECTIVE: CRITICAL_OBJECTIVE, TTFT_SLO: f"{slo_ms[0]:g}", TPOT_SLO: f"{slo_ms[1]:g}"}
        else:
            (low, high), out = batch
            headers = {OBJECTIVE: SHEDDABLE_OBJECTIVE}
        text = f"[request {index}] " + _text(rng, rng.randint(low, high))
        messages = [{"role": "user", "content": text}]
        arrivals.append(_arrival(at, BASE_MODEL, messages, rng.randint(*out), f"request-{index}", headers=headers))
    return arrivals


@dataclass(frozen=True, slots=True)
class Workload:
    """A named generator: ``generate(rate, duration, seed)`` → arrivals.

    ``real_tokens``: its cluster runs the bench tokenizer and publishes KV events (what precise
    prefix routing needs); ``strategies`` and ``replicas`` are what it runs unless told otherwise;
    ``num_gpu_blocks`` overrides the simulated servers' KV cache (blocks of 16 tokens) and
    ``max_num_batched_tokens`` their step budget (the prefill chunk).
    ``time_scale``: the fastest simulated clock its runs may use (a workload streaming many tokens
    keeps the simulators' event loop too busy for real time to stand for simulated time faster).
    """

    name: str
    description: str
    generate: Callable[[float, float, int], list[Arrival]]
    real_tokens: bool = False
    strategies: tuple[str, ...] | None = None
    replicas: tuple[int, ...] = (1,)
    num_gpu_blocks: int | None = None
    max_num_batched_tokens: int | None = None
    time_scale: float | None = None


WORKLOADS: dict[str, Workload] = {
    w.name: w
    for w in (
        Workload(
            "shared-prefix",
            "48 tenants × 3,000-token system prompt, 120-token questions, 16–48 output tokens",
            shared_prefix,
        ),
        Workload(
            "chat-mix",
            "multi-turn chat (2–6 turns, 4 s think time), 50% LoRA (4 adapters, Zipf), 20% sheddable",
            chat_mix,
        ),
        Workload(
            "overload",
            "4 tenants (one sends 70%), 40% critical / 60% sheddable, unique 400-token prompts, 16–48 output tokens",
            overload,
            strategies=("default", "flow-control"),
        ),
        Workload(
            "bursty",
            "Poisson bursts of 4–12 requests within 20 ms, unique 1,500–4,500-token prompts, 16–48 output tokens",
            bursty,
            strategies=("round-robin", "least-queue", "in-flight"),
        ),
        Workload(
            "cache-pressure",
            "160 tenants × 1,000-token system prompt (1.3× the KV cache of 8 servers × 1,024 blocks), "
            "50-token questions, 16–48 output tokens; real token ids and KV events",
            cache_pressure,
            real_tokens=True,
            strategies=("approximate", "precise"),
            replicas=(1, 2),
            num_gpu_blocks=1024,
        ),
        Workload(
            "pd-mix",
            "50% unique 3,000–7,000-token prompts, 50% 100–300-token prompts, 128–384 output tokens "
            "(SLO TTFT 1 s / TPOT 50 ms); 2,048-token prefill chunks",
            pd_mix,
            strategies=("aggregated", "pd-4p4d", "pd-6p2d"),
            num_gpu_blocks=16384,
            max_num_batched_tokens=2048,
            time_scale=0.25,
        ),
        Workload(
            "slo",
            "50% interactive (100–400-token prompts, 16–64 output tokens, SLO TTFT 250 ms / TPOT 50 ms), "
            "50% batch (1,000–2,500-token prompts, 32–128 output tokens, no SLO); unique prompts",
            slo_mix,
            strategies=("default", "queue-kv", "slo"),
        ),
    )
}
DEFAULT_WORKLOADS = ("shared-prefix", "chat-mix")
"""What ``epp bench routing`` runs unless told: ``overload`` is run on its own (docs/benchmarks.md)."""


def capacity(
    arrivals: Sequence[Arrival],
    *,
    servers: int,
    prefill_time_per_token: float,
    decode_time_per_seq: float,
) -> float:
    """Requests/s that would fill every server's prefill budget with nothing cached (plus per-token decode work)."""
    if not arrivals:
        return 0.0
    cost = sum(a.prompt_tokens * prefill_time_per_token + a.max_tokens * decode_time_per_seq for a in arrivals)
    return servers / (cost / len(arrivals))
