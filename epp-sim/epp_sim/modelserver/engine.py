"""The performance model: one asyncio task stepping a continuously batched engine, like vLLM's V1.

Each step the scheduler (a simplified ``vllm/v1/core/sched/scheduler.py``) spends a token budget
of ``max_num_batched_tokens``: first on running sequences (one decode token each, or the next
chunk of a prefill), growing their KV blocks and preempting the newest running sequence when the
cache is full; then, if nothing was preempted, on waiting sequences in arrival order, up to
``max_num_seqs`` running, skipping those whose LoRA adapter is not loaded yet and stopping at
the first that does not fit in the KV cache. A step takes
``decode_time_base + decode_time_per_seq × sequences + prefill_time_per_token × prefill tokens``
simulated seconds; a sequence emits its first token when its prefill completes and one token per
step after that. Requests await their tokens, so streaming sees the model's real TTFT and ITL.

Simulated time is ``(clock.now() − start) × time_scale``; steps are paced against absolute
deadlines so a busy event loop does not slowly stretch simulated time.

Disaggregated serving (``disagg.py`` reads the requests): a *remote-decode* request (the prefill
pod's leg) runs as any other and finishes with ``remote_decode``; a *remote-prefill* request (the
decode pod's leg) is admitted with its whole prompt's blocks, computes nothing of it, and waits
``kv_transfer_latency + uncached prompt tokens × kv_transfer_time_per_token`` (the pull of its KV
from the prefill pod, taking no step budget) before it decodes: its first token comes out of its
first decode step. An aggregated pod pays for long prefills in every step that decodes beside
them (the step time above), which is what a decode-only pod is spared.
"""

from __future__ import annotations

import asyncio
import itertools
import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import xxhash

from epp.clock import Clock, SystemClock

from .config import Pins, SimConfig
from .lora import LoraSlots
from .prefix_cache import BlockPool, block_hashes, char_token_ids, count_tokens
from .sequence import (
    EngineStoppedError,
    GenerationRequest,
    InvalidRequestError,
    RequestHandle,
    Seq,
    SeqState,
    prompt_too_long,
)
from .vllm_metrics import GaugeValues, VllmMetrics, cache_config_labels

__all__ = ["Engine", "EngineStoppedError", "GenerationRequest", "InvalidRequestError", "RequestHandle"]

#: a busy loop more than this many wall seconds behind its step deadlines stops catching up
_MAX_LAG = 0.05


@dataclass(slots=True)
class _Step:
    items: list[tuple[Seq, int]] = field(default_factory=list)
    prefill_tokens: int = 0
    decode_tokens: int = 0


class Engine:
    """One simulated vLLM engine core: queues, KV blocks, prefix cache, LoRA slots, metrics."""

    def __init__(
        self,
        config: SimConfig,
        *,
        clock: Clock | None = None,
        on_kv_events: Callable[[list[dict[str, Any]]], None] | None = None,
    ) -> None:
        """``on_kv_events`` receives each step's KV events (as vLLM 0.32 encodes them), when given."""
        self.config = config
        self._clock: Clock = clock or SystemClock()
        self._t0 = self._clock.now()
        self._on_kv_events = on_kv_events
        self._pool = BlockPool(
            config.num_gpu_blocks,
            enable_prefix_caching=config.enable_prefix_caching,
            block_size=config.block_size,
            record_events=on_kv_events is not None,
        )
        self._lora = LoraSlots(config.max_loras, config.lora_load_time)
        self._adapters: dict[str, str] = dict(config.lora_modules)
        self._waiting: deque[Seq] = deque()
        self._running: list[Seq] = []
        self._pins = config.pins
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._finished = 0
        self._lora_stamp = 0.0
        self.metrics = VllmMetrics(
            model=config.model,
            max_model_len=config.max_model_len,
            cache_config=cache_config_labels(
                block_size=config.block_size,
                num_gpu_blocks=config.num_gpu_blocks,
                max_model_len=config.max_model_len,
                enable_prefix_caching=config.enable_prefix_caching,
            ),
            lora_enabled=config.enable_lora,
            start_wall=self._clock.wall(),
        )
        self._record_lora()

    # -- lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the stepping task."""
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"sim-engine[{self.config.model}]")

    async def stop(self) -> None:
        """Stop stepping; every request still in flight fails with :class:`EngineStoppedError`."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                if not task.cancelled():
                    raise
        for seq in [*self._running, *self._waiting]:
            self._pool.release(seq.holding)
            seq.state = SeqState.FINISHED
            seq.finish_reason = "abort"
            seq.stopped = True
            seq.event.set()
        self._running.clear()
        self._waiting.clear()

    # -- requests -------------------------------------------------------------------------------

    def now(self) -> float:
        """Simulated seconds since the engine was built."""
        return (self._clock.now() - self._t0) * self.config.time_scale

    def submit(self, req: GenerationRequest) -> RequestHandle:
        """Queue a request; raise :class:`InvalidRequestError` if it can never be served."""
        cfg = self.config
        if req.adapter is not None and req.adapter not in self._adapters:
            raise InvalidRequestError(f"unknown LoRA adapter {req.adapter!r}")
        if req.n < 1:
            raise InvalidRequestError(f"n must be at least 1, got {req.n}")
        if req.max_tokens is not None and req.max_tokens < 1:
            raise InvalidRequestError(f"max_tokens must be at least 1, got {req.max_tokens}")
        prompt_tokens = count_tokens(req.prompt) if isinstance(req.prompt, str) else max(1, len(req.prompt))
        limit = cfg.max_model_len
        if prompt_tokens > limit:
            raise prompt_too_long(
                min(prompt_tokens, limit + 1) if isinstance(req.prompt, str) else prompt_tokens, limit
            )
        if req.max_tokens is not None and req.max_tokens > limit:
            raise InvalidRequestError(
                f"max_tokens={req.max_tokens} cannot be greater than max_model_len={limit}. Please request "
                f"fewer output tokens. (parameter=max_tokens, value={req.max_tokens})",
                param="max_tokens",
            )
        room = limit - prompt_tokens
        if room < 1:
            raise InvalidRequestError(
                f"This model's maximum context length is {limit} tokens and your prompt has {prompt_tokens}: "
                "no room for an output token.",
                param="input_tokens",
            )
        seed = req.seed if req.seed is not None else _prompt_seed(req.prompt, cfg.seed)
        if req.max_tokens is not None:
            target = min(req.max_tokens, room)  # vLLM 0.32 clamps what the context cannot hold
        else:
            low = max(1, cfg.default_max_tokens // 4)
            target = min(room, low + seed % (cfg.default_max_tokens - low + 1))
        salt = req.adapter or cfg.model
        text = req.prompt if isinstance(req.prompt, str) and self._on_kv_events is not None else None
        seq = Seq(
            prompt_tokens=prompt_tokens,
            hashes=block_hashes(req.prompt, block_size=cfg.block_size, salt=salt),
            target=target,
            req=req,
            seed=seed,
            tokens=char_token_ids(text) if text is not None else None,
        )
        seq.arrival = self.now()
        if self._below_cache_threshold(seq, req.cache_hit_threshold):
            return RequestHandle(seq, self._abort)
        self._waiting.append(seq)
        self._wake.set()
        return RequestHandle(seq, self._abort)

    def _below_cache_threshold(self, seq: Seq, threshold: float | None) -> bool:
        """``cache_hit_threshold``: finish at once with ``cache_threshold`` when too little of the prompt is cached."""
        if threshold is None or threshold <= 0:
            return False
        cached = self._pool.match(seq.hashes) * self.config.block_size
        if cached >= threshold * seq.prompt_tokens:
            return False
        seq.state = SeqState.FINISHED
        seq.finish_reason = "cache_threshold"
        seq.finished_at = seq.arrival
        self.metrics.add_success("abort")
        seq.event.set()
        return True

    def _abort(self, seq: Seq) -> None:
        if seq.state is SeqState.FINISHED:
            return
        if seq.state is SeqState.WAITING:
            self._waiting.remove(seq)
        else:
            self._running.remove(seq)
        self._pool.release(seq.holding)
        seq.state = SeqState.FINISHED
        seq.finish_reason = "abort"
        seq.finished_at = self.now()
        self.metrics.add_success("abort")
        seq.event.set()
        self._record_lora()

    # -- adapters and pins ----------------------------------------------------------------------

    @property
    def adapters(self) -> dict[str, str]:
        """Known adapters: name → path."""
        return dict(self._adapters)

    def add_adapter(self, name: str, path: str) -> None:
        """Register an adapter (``/v1/load_lora_adapter``); it loads on first use."""
        if not self.config.enable_lora:
            raise InvalidRequestError("LoRA is not enabled on this server")
        if not name or "," in name or name == self.config.model:
            raise InvalidRequestError(f"invalid adapter name {name!r}")
        if name in self._adapters:
            raise InvalidRequestError(f"The lora adapter '{name}' has already been loaded.")
        self._adapters[name] = path

    def remove_adapter(self, name: str) -> None:
        """Forget an adapter (``/v1/unload_lora_adapter``); refused while requests use it."""
        if name not in self._adapters:
            raise InvalidRequestError(f"The lora adapter '{name}' cannot be found.")
        if any(s.adapter == name for s in itertools.chain(self._running, self._waiting)):
            raise InvalidRequestError(f"The lora adapter '{name}' is in use.")
        del self._adapters[name]
        self._lora.unload(name)

    @property
    def pins(self) -> Pins:
        return self._pins

    def set_pins(self, pins: Pins) -> None:
        """Replace the pinned values reported in ``/metrics``."""
        self._pins = pins
        self._record_lora()

    # -- observation ----------------------------------------------------------------------------

    @property
    def running(self) -> int:
        return len(self._running)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def kv_cache_usage(self) -> float:
        return self._pool.usage

    @property
    def idle(self) -> bool:
        """Nothing queued or running."""
        return not self._running and not self._waiting

    def gauges(self) -> GaugeValues:
        """What ``/metrics`` reports right now, pins applied."""
        p = self._pins
        if p.waiting is None:
            waiting = len(self._waiting)
            loaded = set(self._lora.loaded(self.now()))
            deferred = sum(1 for s in self._waiting if s.adapter is not None and s.adapter not in loaded)
        else:
            waiting, deferred = p.waiting, 0
        return GaugeValues(
            running=len(self._running) if p.running is None else p.running,
            waiting=waiting,
            kv_cache_usage=self._pool.usage if p.kv_cache_usage is None else p.kv_cache_usage,
            deferred=deferred,
            extra=p.gauges or {},
        )

    def render_metrics(self) -> bytes:
        """The ``/metrics`` body."""
        return self.metrics.render(self.gauges())

    def stats(self) -> dict[str, Any]:
        """Model-side counters for ``/_sim/stats``."""
        now = self.now()
        return {
            "running": len(self._running),
            "waiting": len(self._waiting),
            "kv_cache_usage": self._pool.usage,
            "cached_blocks": self._pool.cached_blocks,
            "finished": self._finished,
            "prefix_cache_queries": self.metrics.prefix_cache_queries,
            "prefix_cache_hits": self.metrics.prefix_cache_hits,
            "preemptions": self.metrics.preemptions,
            "remote_decodes": self.metrics.remote_decodes,
            "remote_prefills": self.metrics.remote_prefills,
            "kv_pulled_tokens": self.metrics.kv_pulled_tokens,
            "loaded_adapters": self._lora.loaded(now),
            "resident_adapters": self._lora.resident,
            "sim_time": now,
        }

    # -- the stepping loop ----------------------------------------------------------------------

    async def _run(self) -> None:
        clock = self._clock
        scale = self.config.time_scale
        deadline = clock.now()
        while True:
            now = self.now()
            step = self._schedule(now)
            if step is None:
                pulls = [s.transfer_until for s in self._running if s.transfer_until is not None]
                if not self._waiting and not pulls:
                    self._wake.clear()
                    await self._wake.wait()
                    deadline = clock.now()
                    continue
                # Only adapter loads or KV pulls are pending: wait for the first to complete.
                ready = min([*pulls, (self._lora.next_ready(now) or math.inf) + now]) - now
                duration = max(min(ready, self.config.decode_time_base), 1e-4)
            else:
                duration = self._step_time(step)
            deadline = max(deadline, clock.now() - _MAX_LAG) + duration / scale
            await clock.sleep(deadline - clock.now())
            if step is not None:
                self._complete(step, self.now())
            self._publish_kv_events()
            self._record_lora()  # once per iteration, as vLLM's stat logger records

    def _publish_kv_events(self) -> None:
        if self._on_kv_events is not None:
            events = self._pool.take_events()
            if events:
                self._on_kv_events(events)

    def reset_prefix_cache(self) -> bool:
        """vLLM's ``POST /reset_prefix_cache``: False while running requests hold cached blocks."""
        done = self._pool.reset()
        self._publish_kv_events()
        return done

    def _step_time(self, step: _Step) -> float:
        cfg = self.config
        return (
            cfg.decode_time_base
            + cfg.decode_time_per_seq * len(step.items)
            + cfg.prefill_time_per_token * step.prefill_tokens
        )

    def _schedule(self, now: float) -> _Step | None:
        cfg = self.config
        bs = cfg.block_size
        budget = cfg.max_num_batched_tokens
        step = _Step()
        preempted = False
        i = 0
        while i < len(self._running) and budget > 0:
            seq = self._running[i]
            if seq.transfer_until is not None:
                if seq.transfer_until > now:
                    i += 1  # still pulling its KV from the prefill pod: no step work yet
                    continue
                seq.transfer_until = None
            n = min(seq.prefill_len - seq.computed, budget) if seq.computed < seq.prefill_len else 1
            blocks = -(-(seq.computed + n) // bs)
            while not self._pool.grow(seq.holding, blocks):
                victim = self._running.pop()
                self._preempt(victim)
                preempted = True
                if victim is seq:
                    break
            if seq.state is not SeqState.RUNNING:
                break
            step.items.append((seq, n))
            if seq.computed < seq.prefill_len:
                step.prefill_tokens += n
            else:
                step.decode_tokens += 1
            budget -= n
            i += 1

        if not preempted and self._waiting:
            budget = self._admit(step, budget, now)
        return step if step.items else None

    def _admit(self, step: _Step, budget: int, now: float) -> int:
        cfg = self.config
        bs = cfg.block_size
        skipped: list[Seq] = []
        busy: set[str] | None = None
        wanted: set[str] | None = None
        while self._waiting and len(self._running) < cfg.max_num_seqs and budget > 0:
            seq = self._waiting[0]
            if seq.adapter is not None:
                if busy is None or wanted is None:
                    busy = {s.adapter for s in self._running if s.adapter is not None}
                    wanted = {s.adapter for s in self._waiting if s.adapter is not None}
                if not self._lora.ready(seq.adapter, now, busy=busy, wanted=wanted):
                    skipped.append(self._waiting.popleft())
                    continue
            matched = min(self._pool.match(seq.hashes), (seq.prefill_len - 1) // bs)
            computed = matched * bs
            remote = seq.remote_prefill
            n = 0 if remote else min(seq.prefill_len - computed, budget)
            held = seq.prefill_len if remote else computed + n
            if not self._pool.admit(seq.holding, seq.hashes, matched, -(-held // bs)):
                break
            self._waiting.popleft()
            seq.state = SeqState.RUNNING
            seq.computed = computed
            if seq.scheduled_at is None:
                seq.scheduled_at = now
                seq.cached_tokens = computed
            self.metrics.add_prefix_query(seq.prefill_len, computed)
            self._running.append(seq)
            if seq.adapter is not None and busy is not None:
                busy.add(seq.adapter)
            if remote:
                self._start_pull(seq, now)
                continue
            step.items.append((seq, n))
            step.prefill_tokens += n
            budget -= n
        self._waiting.extendleft(reversed(skipped))
        return budget

    def _start_pull(self, seq: Seq, now: float) -> None:
        """A remote prefill: its prompt's KV arrives from the prefill pod after the modelled transfer time."""
        cfg = self.config
        missing = seq.prefill_len - seq.computed
        seq.transferred_tokens = missing
        seq.transfer_until = now + cfg.kv_transfer_latency + missing * cfg.kv_transfer_time_per_token
        seq.computed = seq.prefill_len
        self.metrics.add_kv_pull(missing)

    def _preempt(self, seq: Seq) -> None:
        """Recompute-style preemption: drop the KV, requeue at the front, keep generated tokens."""
        seq.remote_prefill = False  # a pulled KV that is dropped is recomputed here, as vLLM does
        seq.transfer_until = None
        self._pool.release(seq.holding)
        seq.state = SeqState.WAITING
        seq.preemptions += 1
        seq.prefill_len = seq.prompt_tokens + seq.generated
        seq.computed = 0
        self._waiting.appendleft(seq)
        self.metrics.add_preemption()

    def _complete(self, step: _Step, now: float) -> None:
        m = self.metrics
        prompt_done = 0
        generated = 0
        finished = False
        for seq, n in step.items:
            if seq.state is not SeqState.RUNNING:
                continue  # aborted during the step
            if seq.computed < seq.prefill_len:
                seq.computed += n
                if seq.computed < seq.prefill_len:
                    continue
                self._pool.commit(seq.holding, seq.hashes, seq.tokens, seq.adapter)
                if seq.first_token_at is None:
                    seq.first_token_at = now
                    prompt_done += seq.prompt_tokens
                    m.time_to_first_token.observe(now - seq.arrival)
                    m.request_prefill_kv_computed_tokens.observe(seq.prompt_tokens - seq.cached_tokens)
                else:
                    self._observe_itl(now - seq.last_token_at)
            elif seq.first_token_at is None:  # a remote prefill's first decode step: its first token
                seq.computed += 1
                self._pool.commit(seq.holding, seq.hashes, seq.tokens, seq.adapter)
                seq.first_token_at = now
                prompt_done += seq.prompt_tokens
                m.time_to_first_token.observe(now - seq.arrival)
            else:
                seq.computed += 1
                self._observe_itl(now - seq.last_token_at)
            seq.generated += 1
            generated += 1
            seq.last_token_at = now
            if seq.generated >= seq.target:
                self._finish(seq, now)
                finished = True
            elif seq.stream:
                seq.event.set()
        if finished:
            self._running = [s for s in self._running if s.state is SeqState.RUNNING]
        m.add_tokens(prompt=prompt_done, generation=generated)
        m.iteration_tokens.observe(step.prefill_tokens + step.decode_tokens)

    def _observe_itl(self, seconds: float) -> None:
        self.metrics.inter_token_latency.observe(seconds)

    def _finish(self, seq: Seq, now: float) -> None:
        self._pool.release(seq.holding)
        seq.state = SeqState.FINISHED
        seq.finish_reason = "length" if seq.max_tokens is not None else "stop"
        if seq.remote_decode:
            seq.finish_reason = "remote_decode"
        seq.finished_at = now
        self._finished += 1
        m = self.metrics
        scheduled = seq.scheduled_at if seq.scheduled_at is not None else seq.arrival
        first = seq.first_token_at if seq.first_token_at is not None else now
        m.add_success(seq.finish_reason)
        if seq.remote_decode:
            m.add_remote_decode()
        m.e2e_request_latency.observe(now - seq.arrival)
        m.request_queue_time.observe(scheduled - seq.arrival)
        m.request_prefill_time.observe(first - scheduled)
        m.request_decode_time.observe(now - first)
        if seq.generated > 1:
            m.request_time_per_output_token.observe((now - first) / (seq.generated - 1))
        m.request_num_preemptions.observe(seq.preemptions)
        m.request_inference_time.observe(now - scheduled)
        m.request_prompt_tokens.observe(seq.prompt_tokens)
        m.request_generation_tokens.observe(seq.generated)
        m.request_params_n.observe(seq.n)
        m.request_max_num_generation_tokens.observe(seq.target)
        if seq.max_tokens is not None:
            m.request_params_max_tokens.observe(seq.max_tokens)
        seq.event.set()

    def _record_lora(self) -> None:
        """Stamp ``vllm:lora_requests_info`` with the current (or pinned) adapter sets."""
        if not self.config.enable_lora:
            return
        p = self._pins
        running = p.running_loras
        if running is None:
            running = tuple(dict.fromkeys(s.adapter for s in self._running if s.adapter is not None))
        waiting = p.waiting_loras
        if waiting is None:
            waiting = tuple(dict.fromkeys(s.adapter for s in self._waiting if s.adapter is not None))
        # Strictly increasing stamps: the newest combination is always the largest value.
        self._lora_stamp = max(self._clock.wall(), self._lora_stamp + 1e-6)
        max_lora = self.config.max_loras if p.max_lora is None else p.max_lora
        self.metrics.set_lora_info(running, waiting, max_lora, self._lora_stamp)


def _prompt_seed(prompt: str | Sequence[int], server_seed: int) -> int:
    data = prompt.encode("utf-8", "surrogatepass") if isinstance(prompt, str) else repr(list(prompt)).encode()
    return xxhash.xxh64_intdigest(data, seed=server_seed & 0xFFFFFFFFFFFFFFFF)
